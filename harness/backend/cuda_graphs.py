"""Fixed-shape forwards over a static KV cache, replayed from CUDA graphs.

Used for the target's verify forward (``cuda_graphs=verify`` or ``on``) and for
the drafters' steps (``on``): the draft LM's chain/level forwards, the EAGLE
head's catch-up and tree expansions, the Lyanna backbone's catch-up and
single-state steps. A captured forward must see the same shapes and addresses
at every replay, so it writes its keys/values at slot indices held in a device
buffer (``PreallocatedLayer.graph_slots``) and attends over the cache's whole
capacity through a full-width additive mask (more attention work than the
logical work the FLOP counters book; caches grow in steps of 256 positions).
Per call the host fills the graph's ``past`` (the cached length, a 0-d device
tensor) and copies the inputs (and a mask's per-call part) into its buffers
(device-side copies, no synchronisation), replays, and sets the cache's
lengths; the slots, the mask and relative positions (``offsets``) are computed
from ``past`` inside the graph (``device_full_width_mask``), and a tree's mask
from its parents (``BuiltBias``). The outputs are cloned (the next replay
overwrites them). ``run_block`` graphs a whole block of device work over a
cache (a drafter's draft: its forwards and the tree's bookkeeping between them).

A graph is keyed by the caller's key and the inputs' shapes, so only forwards
whose shapes recur are graphed: a forward on an empty cache (a prompt's
prefill, a drafter's first catch-up over the whole prompt) or over more than
``max_tokens`` new positions runs eagerly on the same static cache instead
(``eager_calls``), so no prompt length ever costs a capture. A graph's first
call runs eagerly twice on a side stream (warm-up, as capture requires), is
captured, then replayed. With ``capture=False`` the same static-buffer forward
runs eagerly instead: that is how the buffer logic is tested without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers.cache_utils import Cache

from harness.backend.device import to_device
from harness.errors import DraftcountError
from harness.backend.models import text_config
from harness.backend.static_cache import PreallocatedLayer, static_layers

# (input buffers by name, full-width mask (1, 1, q, capacity)) -> output tensors
StaticCall = Callable[[dict[str, torch.Tensor], torch.Tensor], tuple[torch.Tensor, ...]]
EagerCall = Callable[[], tuple[torch.Tensor, ...]]  # the same forward, run the plain way
BlockCall = Callable[[dict[str, torch.Tensor], torch.Tensor], tuple[torch.Tensor, ...]]  # (buffers, past) -> outputs
Protect = Callable[[], Callable[[], None]]  # saves what a block overwrites in place; returns what puts it back
MAX_GRAPHED_TOKENS = 256  # default: forwards over more new positions than this are not graphed
GRAPHED_REGION: ContextVar[bool] = ContextVar("graphed_region", default=False)  # inside a graphed forward's body


@contextmanager
def graphed_region() -> Iterator[None]:
    """Mark the block as the body of a graphed forward: under capture it runs once and is then replayed, so an op
    counter (``harness.measure.diagnostics.dispatch``) books what it dispatches as inside a graph, not as per-step host
    work."""
    token = GRAPHED_REGION.set(True)
    try:
        yield
    finally:
        GRAPHED_REGION.reset(token)


def write_full_width_bias(buffer: torch.Tensor, bias: torch.Tensor | None, past: int, count: int) -> None:
    """Fill ``buffer`` (1, 1, q, capacity) for ``count`` queries after ``past`` cached positions.

    ``bias`` (..., q, W) covers the last W of the past + q keys (earlier keys are visible to every query);
    None means causal. Keys beyond past + q are masked. Two or three device ops, whatever the shape: a single query
    sees everything up to itself (one fill), a causal block comes from a cache of upper-triangular blocks."""
    low = torch.finfo(buffer.dtype).min
    if bias is not None and bias.shape[-1] > past + count:
        raise DraftcountError(f"a mask over {bias.shape[-1]} keys for a forward that sees {past + count}")
    buffer.fill_(low)
    if bias is None and count == 1:
        buffer[..., :past + 1] = 0
        return
    if bias is None:
        buffer[..., :past] = 0
        buffer[0, 0, :, past:past + count] = causal_block(count, buffer.dtype, buffer.device)
        return
    width = bias.shape[-1]
    buffer[..., :past + count - width] = 0
    buffer[0, 0, :, past + count - width:past + count] = bias.reshape(count, width)


_CAUSAL_BLOCKS: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def causal_block(count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(count, count): 0 on and below the diagonal, the dtype's lowest value above it; made once per shape."""
    key = (count, dtype, device)
    if key not in _CAUSAL_BLOCKS:
        _CAUSAL_BLOCKS[key] = torch.full((count, count), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)
    return _CAUSAL_BLOCKS[key]


SEQUENCE_DEPENDENT_ROPE = frozenset({"dynamic", "longrope"})  # frequencies chosen from the sequence length at run time


def rope_types(config) -> set[str]:
    """The RoPE variants a model configuration uses ("default" when it names none)."""
    text = text_config(config)
    params = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    groups = list(params.values()) if params and all(isinstance(v, dict) for v in params.values()) else [params]
    return {str(group.get("rope_type", group.get("type", "default"))) for group in groups}


def check_capturable(config, what: str) -> None:
    """Refuse CUDA graphs for a model whose RoPE depends on the sequence length: the frequencies it picks on
    the host would be frozen into the graph at capture (and picking them reads a device value)."""
    dynamic = rope_types(config) & SEQUENCE_DEPENDENT_ROPE
    if dynamic:
        raise DraftcountError(f"{what} uses {'/'.join(sorted(dynamic))} RoPE scaling, which a CUDA graph cannot "
                              "capture; run it with cuda_graphs=off")


def device_full_width_mask(past: torch.Tensor, tail: torch.Tensor, keys: torch.Tensor, count: int) -> torch.Tensor:
    """(1, 1, count, capacity) additive mask built on the device from ``past`` (a 0-d long tensor: cached
    positions) and ``tail`` (count, W): ``tail`` covers the last W of the past + count keys, the earlier ones
    are visible, later ones masked; ``keys`` is arange(capacity). No host value: a graph computes it each replay."""
    width = tail.shape[-1]
    offset = keys - (past + (count - width))  # each key's column in ``tail`` (negative: the visible prefix)
    columns = tail.index_select(1, offset.clamp(0, width - 1))
    low = torch.finfo(tail.dtype).min
    inside = torch.where(offset < width, columns, torch.full_like(columns, low))
    return torch.where(offset < 0, torch.zeros_like(columns), inside)[None, None]


Offsets = tuple[int, ...] | torch.Tensor  # position ids relative to the cached length: fixed per shape, or per call


class BuiltBias(Protocol):
    """A mask a graphed forward builds inside its graph: ``build(source)`` (q, W) from ``source`` (copied per call;
    ``width`` W; ``key`` says what the build depends on besides the source's shape). ``AncestorBias``: a tree's."""

    source: torch.Tensor

    @property
    def width(self) -> int: ...

    @property
    def key(self) -> Hashable: ...

    def build(self, source: torch.Tensor) -> torch.Tensor: ...


Bias = torch.Tensor | BuiltBias | None  # a mask over the last W keys (``write_full_width_bias``), or one built so


def _bias_width(bias: Bias) -> int | None:
    return None if bias is None else bias.shape[-1] if isinstance(bias, torch.Tensor) else bias.width


@dataclass
class _Graph:
    inputs: dict[str, torch.Tensor]
    past: torch.Tensor  # () cached positions before the forward (filled per call; slots and mask follow on the device)
    tail: torch.Tensor  # (q, W) the mask's last W columns: a per-call copy, or the causal block (no bias)
    ranks: torch.Tensor  # (q,) 0..q-1: the slots are past + ranks
    keys: torch.Tensor  # (capacity,) 0..capacity-1
    offsets: torch.Tensor | None  # (q,) positions relative to past (a copy per call, or fixed per shape), or None
    built: BuiltBias | None = None  # a mask built inside the graph from its source (then copied per call to ``source``)
    source: torch.Tensor | None = None
    graph: torch.cuda.CUDAGraph | None = None
    outputs: tuple[torch.Tensor, ...] | None = None
    keep: tuple[torch.Tensor, ...] = ()  # device constants the body reads (a captured graph holds their addresses)


@dataclass
class _Block:
    inputs: dict[str, torch.Tensor]
    past: torch.Tensor  # () the cache's length before the block
    graph: torch.cuda.CUDAGraph | None = None
    outputs: tuple[torch.Tensor, ...] | None = None
    keep: tuple[torch.Tensor, ...] = ()  # device constants the body reads (a captured graph holds their addresses)


def _graph_key(key: Hashable, count: int, bias: Bias, offsets: Offsets | None,
               inputs: dict[str, torch.Tensor]) -> Hashable:
    """A graph per caller key, count, mask (width, or how it is built), position offsets (their values when fixed
    per shape) and inputs."""
    width = bias.shape[-1] if isinstance(bias, torch.Tensor) else None if bias is None else \
        (bias.key, tuple(bias.source.shape), bias.source.dtype)
    fixed = offsets if isinstance(offsets, tuple) else (offsets is not None)
    return (key, count, width, fixed, tuple((name, tuple(value.shape), value.dtype) for name, value in inputs.items()))


class GraphedForwards:
    """One model's fixed-shape forwards on one static KV cache at a time, replayed from CUDA graphs."""

    def __init__(self, device: torch.device, dtype: torch.dtype, capture: bool = True,
                 max_tokens: int = MAX_GRAPHED_TOKENS) -> None:
        if capture and device.type != "cuda":
            raise DraftcountError(f"CUDA graphs (cuda_graphs=verify|on) need a CUDA device; the model is on {device}")
        if max_tokens < 1:
            raise DraftcountError(f"max_tokens must be >= 1, got {max_tokens}")
        self.device, self.dtype, self.capture, self.max_tokens = device, dtype, capture, max_tokens
        self.graphs: dict[Hashable, _Graph] = {}
        self.pool = None
        self.warmup_stream: torch.cuda.Stream | None = None  # where a graph's first call warms up before capture
        self.cache: Cache | None = None
        self.captures = 0
        self.calls = 0  # forwards run through here (replayed, or on the buffers eagerly with capture=False)
        self.eager_calls = 0  # of which were not graphed: on an empty cache or over more than max_tokens

    def graphs_forward(self, past: int, count: int) -> bool:
        """Whether a forward over ``count`` new positions after ``past`` cached ones is graphed (its shape
        recurs) rather than run eagerly (a prefill or first catch-up, or more than ``max_tokens`` positions)."""
        return past > 0 and count <= self.max_tokens

    def _layers(self, cache: Cache) -> list[PreallocatedLayer]:
        layers = static_layers(cache)
        if layers is None or not all(layer.is_initialized for layer in layers):
            raise DraftcountError("a graphed forward needs a static KV cache whose buffers are allocated")
        if cache is not self.cache:  # graphs point at one cache's buffers: capture anew in a fresh pool
            self.graphs.clear()
            if self.capture:
                with torch.cuda.device(self.device):  # the pool and the captures live on the model's GPU
                    self.pool = torch.cuda.graph_pool_handle()
            self.cache = cache
        return layers

    def _new_graph(self, count: int, capacity: int, bias: Bias, offsets: Offsets | None,
                   inputs: dict[str, torch.Tensor]) -> _Graph:
        device = self.device
        if bias is None:
            tail = causal_block(count, self.dtype, device).clone()
        else:
            tail = torch.zeros((count, _bias_width(bias)), dtype=self.dtype, device=device)
        fixed = None
        if isinstance(offsets, tuple):
            fixed = to_device(torch.tensor(offsets, dtype=torch.long), device)  # fixed per shape, uploaded once
        elif offsets is not None:
            fixed = torch.zeros(count, dtype=torch.long, device=device)
        built = None if bias is None or isinstance(bias, torch.Tensor) else bias
        return _Graph(inputs={name: torch.zeros_like(value) for name, value in inputs.items()},
                      past=torch.zeros((), dtype=torch.long, device=device), tail=tail,
                      ranks=torch.arange(count, device=device), keys=torch.arange(capacity, device=device),
                      offsets=fixed, built=built, source=None if built is None else torch.zeros_like(built.source))

    def run(self, key: Hashable, cache: Cache, past: int, count: int, bias: Bias,
            inputs: dict[str, torch.Tensor], call: StaticCall, eager: EagerCall,
            offsets: Offsets | None = None, generator: torch.Generator | None = None,
            keep: tuple[torch.Tensor, ...] = ()) -> tuple[torch.Tensor, ...]:
        """``call`` on ``count`` new positions after ``past`` cached ones (``bias`` as in
        ``write_full_width_bias``, of a width fixed per shape, or a ``BuiltBias``); returns its outputs, as an eager
        forward would.
        ``offsets``: the position ids relative to ``past`` (a tuple fixed per shape, or a (count,) device tensor),
        added to ``past`` on the device as ``inputs["position_ids"]`` (1, count) (then not among ``inputs``). A
        forward that is not graphed (``graphs_forward``) is ``eager()``, which extends the static cache the plain
        way. Per call the host fills ``past`` and copies the inputs (and a bias, and offsets given as a tensor):
        the slots and the full-width mask are computed inside the graph. A ``BuiltBias``'s source is among the
        buffers ``call`` sees (``source``). ``generator``: one the body draws from (registered with the graph at
        capture, so each replay advances it). ``keep``: device constants ``call`` reads that nothing else may keep
        alive (a cached shape's indices or masks): the graph holds them, as a captured graph holds their addresses."""
        layers = self._layers(cache)
        self.calls += 1
        if not self.graphs_forward(past, count):
            self.eager_calls += 1
            return eager()
        capacity = layers[0].capacity
        if past + count > capacity:
            raise DraftcountError(f"static KV cache holds {capacity} positions; this forward needs {past + count}")
        if bias is not None and _bias_width(bias) > past + count:
            raise DraftcountError(f"a mask over {_bias_width(bias)} keys for a forward that sees {past + count}")
        full_key = _graph_key(key, count, bias, offsets, inputs)
        graph = self.graphs.get(full_key)
        if graph is None:
            graph = self.graphs[full_key] = self._new_graph(count, capacity, bias, offsets, inputs)
            graph.keep = keep
        graph.past.fill_(past)
        for name, value in inputs.items():
            graph.inputs[name].copy_(value)
        if isinstance(bias, torch.Tensor):
            graph.tail.copy_(bias.reshape(count, bias.shape[-1]))
        elif bias is not None:
            graph.source.copy_(bias.source)
        if isinstance(offsets, torch.Tensor):
            graph.offsets.copy_(offsets.reshape(count))
        outputs = self._replay(graph, lambda: self._call(graph, layers, call), generator)
        for layer in layers:
            layer.set_length(past + count)
        return outputs

    def run_block(self, key: Hashable, cache: Cache | None, past: int, length: int, inputs: dict[str, torch.Tensor],
                  body: BlockCall, forwards: int = 1, generator: torch.Generator | None = None,
                  keep: tuple[torch.Tensor, ...] = (), protect: Protect | None = None) -> tuple[torch.Tensor, ...]:
        """A block of fixed-shape device work over ``cache`` as one graph (a drafter's whole draft: its forwards and
        the tree's bookkeeping between them): ``body(buffers, past)`` with ``past`` a 0-d device tensor (the cached
        length before the block), each forward writing at slots it computes from it (``writing_at``), its masks from
        ``device_full_width_mask``. Nothing in ``body`` may read a device value or depend on a host value that
        changes between calls (those are inputs). Per call the host fills ``past`` and copies ``inputs``; the
        cache's lengths are then ``length``. ``forwards``: the model forwards the block holds (``calls`` counts them).
        A block over no cache (``cache`` None: heads that read only their inputs, Medusa's) has no length to set.
        ``generator``: one the body draws from (registered with the graph at capture, as ``run``'s); ``keep``: the
        device constants it reads, held by the graph (as ``run``'s). ``protect``: for a body that reads what it
        writes (a gather within one buffer), saves what it overwrites and returns what restores it: a capture's two
        eager warm-ups run the body before the replay, and the replay must find the state the call found."""
        layers = self._layers(cache) if cache is not None else []
        self.calls += forwards
        if layers and length > layers[0].capacity:
            raise DraftcountError(f"static KV cache holds {layers[0].capacity} positions; this block needs {length}")
        full_key = ("block", key, tuple((name, tuple(value.shape), value.dtype) for name, value in inputs.items()))
        graph = self.graphs.get(full_key)
        if graph is None:
            graph = self.graphs[full_key] = _Block({name: torch.zeros_like(value) for name, value in inputs.items()},
                                                   torch.zeros((), dtype=torch.long, device=self.device), keep=keep)
        graph.past.fill_(past)
        for name, value in inputs.items():
            graph.inputs[name].copy_(value)
        outputs = self._replay(graph, lambda: _in_region(lambda: tuple(body(graph.inputs, graph.past))), generator,
                               protect)
        for layer in layers:
            layer.set_length(length)
        return outputs

    def _replay(self, graph: _Graph | _Block, call: Callable[[], tuple[torch.Tensor, ...]],
                generator: torch.Generator | None = None, protect: Protect | None = None) -> tuple[torch.Tensor, ...]:
        """``call`` (the graph's body) on the CPU; on a GPU its graph, captured at the first call, replayed."""
        if not self.capture:
            return call()
        if graph.graph is None:
            self._capture(graph, call, generator, protect)
        graph.graph.replay()
        return tuple(output.clone() for output in graph.outputs)

    def _call(self, graph: _Graph, layers: list[PreallocatedLayer], call: StaticCall) -> tuple[torch.Tensor, ...]:
        """The graph's body: the slots, the mask and the positions from ``graph.past`` on the device, then ``call``."""
        with graphed_region(), writing_at(layers, graph.past + graph.ranks):
            inputs = dict(graph.inputs)
            if graph.source is not None:
                inputs["source"] = graph.source
            if graph.offsets is not None:
                inputs["position_ids"] = (graph.past + graph.offsets)[None]
            tail = graph.tail if graph.built is None else graph.built.build(graph.source)
            mask = device_full_width_mask(graph.past, tail, graph.keys, graph.ranks.shape[0])
            return tuple(call(inputs, mask))

    def _capture(self, graph: _Graph | _Block, call: Callable[[], tuple[torch.Tensor, ...]],
                 generator: torch.Generator | None = None, protect: Protect | None = None) -> None:
        """Warm up on a side stream (one per runner, reused), capture, and only then store the graph: a capture
        that raises leaves no half-made graph behind to be replayed by the next call of this shape. A
        ``generator`` the body draws from is registered with the graph (CUDA captures only the default
        generator's draws otherwise)."""
        main = torch.cuda.current_stream(self.device)
        if self.warmup_stream is None:
            self.warmup_stream = torch.cuda.Stream(device=self.device)
        restore = protect() if protect is not None else None  # on the main stream, before the warm-ups
        self.warmup_stream.wait_stream(main)
        with torch.cuda.stream(self.warmup_stream):
            for _ in range(2):
                call()
        main.wait_stream(self.warmup_stream)
        if restore is not None:
            restore()  # the state the call found, for the replay
        captured = torch.cuda.CUDAGraph()
        if generator is not None:
            captured.register_generator_state(generator)
        with torch.cuda.device(self.device), torch.cuda.graph(captured, pool=self.pool):
            outputs = call()
        graph.graph, graph.outputs = captured, outputs
        self.captures += 1


def _in_region(call: Callable[[], tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    with graphed_region():
        return call()


@contextmanager
def writing_at(layers: list[PreallocatedLayer], slots: torch.Tensor) -> Iterator[None]:
    """Inside a graph's body: the static cache's layers write this forward's keys/values at ``slots`` (device)."""
    for layer in layers:
        layer.graph_slots = slots
    try:
        yield
    finally:
        for layer in layers:
            layer.graph_slots = None
