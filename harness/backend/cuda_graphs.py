"""Fixed-shape forwards over a static KV cache, replayed from CUDA graphs.

Used for the target's verify forward (``cuda_graphs=verify`` or ``on``) and for
the drafters' steps (``on``): the draft LM's chain/level forwards, the EAGLE
head's catch-up and tree expansions, the Lyanna backbone's catch-up and
single-state steps. A captured forward must see the same shapes and addresses
at every replay, so it writes its keys/values at slot indices held in a device
buffer (``PreallocatedLayer.graph_slots``) and attends over the cache's whole
capacity through a full-width additive mask (more attention work than the
logical work the FLOP counters book; caches grow in steps of 256 positions).
Per call the host only copies the inputs, the slots and the mask into the
graph's buffers (device-side copies, no synchronisation), replays, and sets
the cache's lengths; the outputs are cloned (the next replay overwrites them).

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

import torch
from transformers.cache_utils import Cache

from harness.errors import DraftcountError
from harness.backend.models import text_config
from harness.backend.static_cache import PreallocatedLayer, static_layers

# (input buffers by name, full-width mask (1, 1, q, capacity)) -> output tensors
StaticCall = Callable[[dict[str, torch.Tensor], torch.Tensor], tuple[torch.Tensor, ...]]
EagerCall = Callable[[], tuple[torch.Tensor, ...]]  # the same forward, run the plain way
MAX_GRAPHED_TOKENS = 256  # default: forwards over more new positions than this are not graphed
GRAPHED_REGION: ContextVar[bool] = ContextVar("graphed_region", default=False)  # inside a graphed forward's body


@contextmanager
def graphed_region() -> Iterator[None]:
    """Mark the block as the body of a graphed forward: under capture it runs once and is then replayed, so an op
    counter (``harness.measure.dispatch``) books what it dispatches as inside a graph, not as per-step host work."""
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


@dataclass
class _Graph:
    inputs: dict[str, torch.Tensor]
    slots: torch.Tensor  # (q,) cache positions written by the forward
    bias: torch.Tensor  # (1, 1, q, capacity)
    graph: torch.cuda.CUDAGraph | None = None
    outputs: tuple[torch.Tensor, ...] | None = None


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

    def run(self, key: Hashable, cache: Cache, past: int, count: int, bias: torch.Tensor | None,
            inputs: dict[str, torch.Tensor], call: StaticCall, eager: EagerCall) -> tuple[torch.Tensor, ...]:
        """``call`` on ``count`` new positions after ``past`` cached ones (``bias`` as in
        ``write_full_width_bias``); returns its outputs, as an eager forward would. A forward that is not
        graphed (``graphs_forward``) is ``eager()``, which extends the static cache the plain way."""
        layers = self._layers(cache)
        self.calls += 1
        if not self.graphs_forward(past, count):
            self.eager_calls += 1
            return eager()
        capacity = layers[0].capacity
        if past + count > capacity:
            raise DraftcountError(f"static KV cache holds {capacity} positions; this forward needs {past + count}")
        full_key = (key, count, tuple((name, tuple(value.shape), value.dtype) for name, value in inputs.items()))
        graph = self.graphs.get(full_key)
        if graph is None:
            graph = self.graphs[full_key] = _Graph(
                inputs={name: torch.zeros_like(value) for name, value in inputs.items()},
                slots=torch.zeros(count, dtype=torch.long, device=self.device),
                bias=torch.zeros((1, 1, count, capacity), dtype=self.dtype, device=self.device))
        for name, value in inputs.items():
            graph.inputs[name].copy_(value)
        torch.arange(past, past + count, out=graph.slots)
        write_full_width_bias(graph.bias, bias, past, count)
        if not self.capture:
            outputs = self._call(graph, layers, call)
        else:
            if graph.graph is None:
                self._capture(graph, layers, call)
            graph.graph.replay()
            outputs = tuple(output.clone() for output in graph.outputs)
        for layer in layers:
            layer.set_length(past + count)
        return outputs

    def _call(self, graph: _Graph, layers: list[PreallocatedLayer], call: StaticCall) -> tuple[torch.Tensor, ...]:
        for layer in layers:
            layer.graph_slots = graph.slots
        try:
            with graphed_region():
                return tuple(call(graph.inputs, graph.bias))
        finally:
            for layer in layers:
                layer.graph_slots = None

    def _capture(self, graph: _Graph, layers: list[PreallocatedLayer], call: StaticCall) -> None:
        """Warm up on a side stream (one per runner, reused), capture, and only then store the graph: a capture
        that raises leaves no half-made graph behind to be replayed by the next call of this shape."""
        main = torch.cuda.current_stream(self.device)
        if self.warmup_stream is None:
            self.warmup_stream = torch.cuda.Stream(device=self.device)
        self.warmup_stream.wait_stream(main)
        with torch.cuda.stream(self.warmup_stream):
            for _ in range(2):
                self._call(graph, layers, call)
        main.wait_stream(self.warmup_stream)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.device(self.device), torch.cuda.graph(captured, pool=self.pool):
            outputs = self._call(graph, layers, call)
        graph.graph, graph.outputs = captured, outputs
        self.captures += 1
