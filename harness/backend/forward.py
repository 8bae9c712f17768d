"""One counted forward pass: every model call of every method goes through here.

Each call adds its forward count, processed tokens and FLOP estimate to a
ForwardTally, so target and drafter work are measured the same way for all
methods.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

import torch
from torch.nn import functional
from transformers import DynamicCache

from harness.backend.cuda_graphs import (
    Bias, GraphedForwards, Offsets, causal_block, device_full_width_mask, writing_at,
)
from harness.backend.device import to_device
from harness.errors import DraftcountError
from harness.backend.kv_cache import cache_argument
from harness.backend.models import LoadedModel
from harness.backend.phases import NO_CLOCK, PhaseClock
from harness.backend.static_cache import static_layers
from harness.hybrid.cache import TreeStateCache
from harness.hybrid.forward import tree_forward


@dataclass
class ForwardTally:
    forwards: int = 0
    tokens: int = 0
    flops: float = 0.0

    def __post_init__(self) -> None:  # not fields: a tally's records hold counts only
        self.clock: PhaseClock = NO_CLOCK
        self.phase = "target"

    def timed_by(self, clock: PhaseClock, phase: str) -> None:
        """Time this tally's forwards as ``phase`` on ``clock`` (``run_model``)."""
        self.clock, self.phase = clock, phase

    def add(self, new_tokens: int, flops: float) -> None:
        self.forwards += 1
        self.tokens += new_tokens
        self.flops += flops


@dataclass
class LMOutput:
    logits: torch.Tensor  # (B, q, V) or (B, logits_to_keep, V)
    hidden_states: tuple[torch.Tensor | None, ...] | None  # embeddings + every layer, when asked for (None
    # at the layers not kept: see ``run_model``'s ``hidden_layers``)
    flops: float = 0.0  # this forward's FLOP estimate (already added to the tally)
    choices: torch.Tensor | None = None  # (q,) the argmax of each row of a batch-1 forward, computed inside its graph
    draws: tuple[torch.Tensor, torch.Tensor] | None = None  # sampling verification's draws made inside its graph
    # (``InGraphDraws``): per row accepted (long) and the bonus token


@dataclass(frozen=True)
class InGraphDraws:
    """Sampling verification's random draws, made inside a graphed forward after its logits so that a sampled step
    dispatches nothing outside the graph (``harness.engine.graph_draws`` builds them for the target's verify
    forward). ``draw(logits (q, V), buffers)`` -> (accepted (q,), bonus (q,)), device work only; the buffers hold
    the forward's ``input_ids`` and ``inputs`` (copied in per call) and a built mask's ``source``. ``key`` names
    what ``draw`` does (part of the graph's key); ``generator``: the one it draws from."""

    key: Hashable
    draw: Callable[[torch.Tensor, dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    generator: torch.Generator | None = None
    keep: tuple[torch.Tensor, ...] = ()  # device constants ``draw`` reads, held by the graph (``GraphedForwards.run``)


def run_model(
    lm: LoadedModel,
    input_ids: torch.Tensor,
    cache: DynamicCache,
    position_ids: torch.Tensor | None,
    tally: ForwardTally,
    attention_bias: Bias = None,
    logits_to_keep: int = 0,
    output_hidden_states: bool = False,
    graphs: GraphedForwards | None = None,
    hidden_layers: tuple[int, ...] | None = None,
    media: Mapping[str, torch.Tensor] | None = None,
    position_offsets: Offsets | None = None,
    draws: InGraphDraws | None = None,
) -> LMOutput:
    """Run ``lm`` on ``input_ids`` (B, q) at ``position_ids`` (B, q), extending ``cache``.

    ``attention_bias`` is an additive float mask (B, 1, q, W) over the last W
    of the past + q keys (a token tree's nodes, say); the keys before them (the
    cached prefix) are visible to every query. None: causal attention. A
    ``BuiltBias`` (a deferred tree's) is built from its source, inside the
    graph of a graphed forward.
    ``logits_to_keep`` > 0 computes logits only for the last that many
    positions. With ``output_hidden_states``, ``hidden_layers`` names the
    hidden states kept (indices into embeddings + every layer, negative from
    the end; None: all): the others are None in the output, and a graphed
    forward copies out only the kept ones. With ``graphs`` (a static cache)
    the forward is replayed from a CUDA graph of its shape
    (``harness.backend.cuda_graphs``; prefills run eagerly). ``media``: the
    model's other inputs of a prefill (a vision-language target's
    ``pixel_values``), passed as they are; eager only. ``position_offsets``
    (instead of ``position_ids``): the positions relative to the cached
    length, a tuple fixed per shape or a (q,) device tensor (a graphed
    forward adds the cached length on the device). A graphed forward of a
    batch of one also returns each row's argmax (``LMOutput.choices``) and, with ``draws``, sampling
    verification's draws for the rows (``LMOutput.draws``; None when the forward is not graphed).
    """
    past = cache.get_seq_length()
    if (position_ids is None) == (position_offsets is None):
        raise DraftcountError("run_model takes position_ids or position_offsets, exactly one of them")
    new_tokens = input_ids.shape[-1]
    total = lm.hidden_state_count if output_hidden_states else 0
    kept = kept_layers(hidden_layers, total) if output_hidden_states else ()

    def eager() -> tuple[torch.Tensor, ...]:
        bias = attention_bias
        if bias is not None and not isinstance(bias, torch.Tensor):  # built from its source (``BuiltBias``)
            bias = bias.build(bias.source)[None, None]
        mask = prefix_visible(bias, past + new_tokens)
        ids = position_ids if position_ids is not None else absolute_positions(position_offsets, past, input_ids.device)
        if isinstance(cache, TreeStateCache):  # a hybrid target: the tree's shape read from its (full) mask
            return _tree_outputs(lm, input_ids, cache, ids, mask, logits_to_keep, kept)
        return forward_outputs(lm, input_ids, cache, ids, mask, logits_to_keep, kept, total, media)

    if media and (graphs is not None or isinstance(cache, TreeStateCache)):
        raise DraftcountError("a forward with media inputs (an image) runs eagerly, on a transformer's cache")

    choices = drawn = None
    with tally.clock.phase(tally.phase):
        if graphs is not None:
            graphed = graphs.graphs_forward(past, new_tokens)  # else graphs.run runs eager() (and counts it)
            draws = draws if input_ids.shape[0] == 1 else None
            inputs = {"input_ids": input_ids} if position_ids is None else {"input_ids": input_ids,
                                                                            "position_ids": position_ids}
            if draws is not None:
                inputs.update(draws.inputs)
            outputs = graphs.run(
                ("lm", logits_to_keep, kept, draws.key if draws else None), cache, past, new_tokens, attention_bias,
                inputs, lambda buffers, mask: _with_draws(_with_choices(forward_outputs(
                    lm, buffers["input_ids"], cache, buffers["position_ids"], mask, logits_to_keep, kept, total)),
                    buffers, draws),
                eager, offsets=position_offsets, generator=draws.generator if draws else None,
                keep=draws.keep if draws else ())
            if graphed:
                logits, choices, *states = outputs
                choices = choices if input_ids.shape[0] == 1 else None
                if draws is not None:
                    drawn, states = (states[0], states[1]), states[2:]
            else:
                logits, *states = outputs
        else:
            logits, *states = eager()
    logits_tokens = min(logits_to_keep, new_tokens) if logits_to_keep > 0 else new_tokens
    flops = count_forward(lm, tally, new_tokens, past, logits_tokens)
    hidden = spread_layers(states, kept, total) if output_hidden_states else None
    return LMOutput(logits=logits, hidden_states=hidden, flops=flops, choices=choices, draws=drawn)


def _with_choices(outputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """A graphed forward's outputs with the first row's argmax after the logits (the greedy verdict's choices,
    made inside the graph so that greedy verification dispatches nothing outside it)."""
    logits, *states = outputs
    return (logits, logits[0].argmax(dim=-1), *states)


def _with_draws(outputs: tuple[torch.Tensor, ...], buffers: dict[str, torch.Tensor],
                draws: InGraphDraws | None) -> tuple[torch.Tensor, ...]:
    """A graphed forward's outputs (logits, choices, states...) with ``draws``' (accepted, bonus) after the choices."""
    if draws is None:
        return outputs
    logits, choices, *states = outputs
    return (logits, choices, *draws.draw(logits[0], buffers), *states)


def absolute_positions(offsets: Offsets, past: int, device: torch.device) -> torch.Tensor:
    """(1, q) position ids ``past + offsets`` (offsets a tuple of ints, or a (q,) tensor) on ``device``."""
    if isinstance(offsets, torch.Tensor):
        return (offsets.to(device) + past).reshape(1, -1)
    return positions(past, 1, device) + to_device(torch.tensor(offsets, dtype=torch.long), device)


def kept_layers(layers: tuple[int, ...] | None, total: int) -> tuple[int, ...]:
    """``layers`` (negative: from the end; None: all) as sorted indices into ``total`` hidden states."""
    if layers is None:
        return tuple(range(total))
    outside = [index for index in layers if not -total <= index < total]
    if outside:
        raise DraftcountError(f"hidden-state layers {outside} do not exist: the model has {total} hidden states "
                              "(embeddings + every layer)")
    return tuple(sorted({index % total for index in layers}))


def spread_layers(states: list[torch.Tensor], kept: tuple[int, ...], total: int) -> tuple[torch.Tensor | None, ...]:
    """The kept hidden states back at their indices among ``total``, None elsewhere."""
    by_index = dict(zip(kept, states, strict=True))
    return tuple(by_index.get(index) for index in range(total))


def prefix_visible(bias: torch.Tensor | None, keys: int) -> torch.Tensor | None:
    """A mask over the last W of ``keys`` keys widened to all of them, the earlier keys visible (0)."""
    if bias is None or bias.shape[-1] == keys:
        return bias
    return functional.pad(bias, (keys - bias.shape[-1], 0))


def causal_bias(past: int, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """Full mask (1, 1, count, past + count) for ``count`` consecutive positions after ``past`` cached ones,
    built on ``device``; None for a single query (it sees everything)."""
    if count == 1:
        return None
    bias = torch.zeros((count, past + count), dtype=dtype, device=device)
    bias[:, past:] = torch.full((count, count), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)
    return bias[None, None]


DrafterCall = Callable[[dict[str, torch.Tensor], torch.Tensor | None], torch.Tensor]


def run_drafter(call: DrafterCall, cache: DynamicCache, inputs: dict[str, torch.Tensor], count: int,
                bias: torch.Tensor | None, dtype: torch.dtype, graphs: GraphedForwards | None = None,
                key: Hashable = "drafter") -> torch.Tensor:
    """A drafter module's forward over ``count`` new positions on ``cache``: ``call(inputs, full mask)``.

    ``bias`` follows ``run_model``'s convention (a mask over the last keys, the earlier ones visible; None:
    causal). Eager, or replayed from a CUDA graph of its shape with ``graphs`` (a static cache)."""
    past = cache.get_seq_length()

    def eager() -> tuple[torch.Tensor]:
        device = next(iter(inputs.values())).device
        mask = causal_bias(past, count, dtype, device) if bias is None else prefix_visible(bias, past + count)
        return (call(inputs, mask),)

    if graphs is not None:
        return graphs.run(key, cache, past, count, bias, inputs, lambda buffers, mask: (call(buffers, mask),),
                          eager)[0]
    return eager()[0]


def forward_outputs(lm: LoadedModel, input_ids: torch.Tensor, cache: DynamicCache, position_ids: torch.Tensor,
                    mask: torch.Tensor | None, logits_to_keep: int, kept: tuple[int, ...],
                    total: int, media: Mapping[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, ...]:
    """The model's logits, then the hidden states at the ``kept`` indices (of embeddings + every layer)."""
    output = lm.model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=True,
                      logits_to_keep=logits_to_keep, output_hidden_states=bool(kept), **cache_argument(lm.model, cache),
                      **(media or {}))
    if not kept:
        return (output.logits,)
    if len(output.hidden_states) != total:
        raise DraftcountError(f"the model returned {len(output.hidden_states)} hidden states; its configuration "
                              f"says {total} (embeddings + every layer)")
    return (output.logits, *(output.hidden_states[index] for index in kept))


def static_block_logits(lm: LoadedModel, cache: DynamicCache, ids: torch.Tensor, start: torch.Tensor,
                        logits_to_keep: int, tail: torch.Tensor | None = None,
                        position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Inside a graphed block: the logits (1, ``logits_to_keep`` or n, V) of ``ids`` (n,) fed as one block at the
    static cache's slots from ``start`` (a device scalar), after every key before it (a full-width mask, so the
    block's shape does not change with the cache's length). ``tail``: the block's own (n, n) additive mask (default
    causal; a tree level's); ``position_ids`` (1, n): default its slots. The draft LM's catch-up and tree levels,
    and pard's forward over text + masks."""
    layers = static_layers(cache)
    width = ids.shape[0]
    slots = start + torch.arange(width, device=lm.device)
    mask = device_full_width_mask(start, causal_block(width, lm.dtype, lm.device) if tail is None else tail,
                                  torch.arange(layers[0].capacity, device=lm.device), width)
    with writing_at(layers, slots):
        return forward_outputs(lm, ids[None], cache, slots[None] if position_ids is None else position_ids, mask,
                               logits_to_keep, (), 0)[0]


def hybrid_forward(model: torch.nn.Module, input_ids: torch.Tensor, cache: TreeStateCache, position_ids: torch.Tensor,
                   mask: torch.Tensor | None, logits_to_keep: int = 0,
                   hidden: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """``harness.hybrid.forward.tree_forward`` with ``mask`` as ``run_model`` takes it (full, or None: causal)."""
    if mask is None and input_ids.shape[-1] > 1:  # a chain: the tree forward reads its shape from the mask
        mask = causal_bias(cache.get_seq_length(), input_ids.shape[-1], next(model.parameters()).dtype,
                           input_ids.device)
    return tree_forward(model, input_ids, cache, position_ids, mask, logits_to_keep, hidden)


def _tree_outputs(lm: LoadedModel, input_ids: torch.Tensor, cache: TreeStateCache, position_ids: torch.Tensor,
                  mask: torch.Tensor | None, logits_to_keep: int, kept: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    """``forward_outputs`` for a hybrid model on its ``TreeStateCache`` (``harness.hybrid.forward``)."""
    logits, states = hybrid_forward(lm.model, input_ids, cache, position_ids, mask, logits_to_keep, bool(kept))
    return (logits, *(states[index] for index in kept)) if kept else (logits,)


def count_forward(lm: LoadedModel, tally: ForwardTally, new_tokens: int, past: int, logits_tokens: int) -> float:
    """Add one forward of ``new_tokens`` queries after ``past`` cached positions to ``tally``; return its FLOPs."""
    flops = lm.cost.forward_flops(new_tokens, past + new_tokens, logits_tokens)
    tally.add(new_tokens, flops)
    return flops


def positions(start: int, count: int, device: torch.device) -> torch.Tensor:
    """(1, count) position ids start, start+1, ..."""
    return torch.arange(start, start + count, device=device).unsqueeze(0)
