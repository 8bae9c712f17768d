"""A draft LM's whole draft (sd, tree_sd: ``DraftLMAdapter``) as one CUDA graph per shape: the catch-up forward over
the tokens accepted last step, then every level of the expansion (``harness.engine.draft_lm_plan.grow``): the
children drawn (top-k, or sampled with their q at T > 0), the level's nodes fed at slots and under a tree mask
computed on the device, in one ``GraphedForwards.run_block``.

The block's shape is fixed by the catch-up's length (1 to depth + 1 tokens: one graph each), the tree shape, the
drafting convention and the sampling settings; what changes from step to step reaches it as device inputs (the
catch-up's tokens, the draft cache's length ``past``). Each level's mask over the tree's keys depends on the shape
alone: made on the host once per shape and kept on the device. Sampled children are drawn inside the block from
``StepContext.graph_generator`` (the run's generator on the CPU, in the eager draft's order: the same tokens). On the
CPU (``capture=False``) the same body runs eagerly and ``harness.measure.dispatch`` books it as inside a graph.

The host's FLOP booking follows from the shape and runs outside the block. Left on the eager path: a prompt's first
catch-up (an empty draft cache), a catch-up longer than the runner graphs, a cache without room for the draft.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Protocol

import torch
from transformers.cache_utils import Cache

from harness.backend.cuda_graphs import GraphedForwards, causal_block, device_full_width_mask, writing_at
from harness.backend.forward import _forward_outputs, count_forward
from harness.backend.models import LoadedModel
from harness.backend.static_cache import static_layers
from harness.engine.adapter import StepContext
from harness.engine.counters import DrafterWork, book_drafting_forward
from harness.engine.draft_lm_plan import Chooser, ExpansionPlan, Level, grow
from harness.trees.tree import tree_attention_bias


class DraftLMAdapter(Protocol):
    """What the graphed draft reads of ``harness.engine.draft_lm.DraftLMAdapter``."""

    draft: LoadedModel
    cache: Cache
    graphs: GraphedForwards | None
    cached_len: int
    plan: ExpansionPlan
    work: DrafterWork
    chooser: object

    def choose(self, ctx: StepContext) -> Chooser: ...


def graphs_draft(adapter: DraftLMAdapter, count: int) -> bool:
    """Whether this step's draft (a catch-up over ``count`` tokens) runs as one graphed block: a graph runner and a
    static cache, a non-empty draft cache (the runner's rule, ``graphs_forward``), and room for every level."""
    graphs, layers = adapter.graphs, static_layers(adapter.cache)
    if graphs is None or layers is None:
        return False
    return graphs.graphs_forward(adapter.cached_len, count) and draft_length(adapter, count) <= layers[0].capacity


def draft_length(adapter: DraftLMAdapter, count: int) -> int:
    """The draft cache's length after the block: the prefix, the catch-up and every fed node."""
    return adapter.cached_len + count + len(adapter.plan.fed)


@lru_cache(maxsize=64)
def level_tails(plan: ExpansionPlan, dtype: torch.dtype, device: torch.device) -> dict[int, torch.Tensor]:
    """Per level (by depth) that feeds nodes: its mask over the tree's keys (n, W), the causal block where the keys
    form one path; made once per shape, on ``device``."""
    tails = {}
    for level in plan.levels:
        if level.fed:
            bias = tree_attention_bias(plan.parents, list(level.cached), list(level.fed), dtype, device)
            tails[level.depth] = causal_block(len(level.fed), dtype, device) if bias is None else bias[0, 0]
    return tails


def graphed_tokens(adapter: DraftLMAdapter, ctx: StepContext,
                   unseen: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """``DraftLMAdapter.propose``'s tokens (n,) and q's (None: deterministic) from one graphed block
    (``graphs_draft`` must hold), the forwards charged as the eager draft charges them."""
    lm, count, past = adapter.draft, unseen.shape[0], adapter.cached_len
    tails = level_tails(adapter.plan, lm.dtype, lm.device)
    choose = adapter.choose(replace(ctx, generator=ctx.graph_generator()))  # sampled children drawn in the block
    sampled = not ctx.sampling.is_greedy
    settings = (ctx.sampling.temperature, ctx.sampling.top_k, ctx.sampling.top_p) if sampled else ()
    key = ("draft_lm", adapter.plan.parents, count, getattr(adapter.chooser, "__name__", adapter.chooser), settings)

    def body(buffers: dict[str, torch.Tensor], start: torch.Tensor) -> tuple[torch.Tensor, ...]:
        layers = static_layers(adapter.cache)
        device = lm.device
        keys = torch.arange(layers[0].capacity, device=device)
        ranks = torch.arange(count, device=device)
        ids = buffers["ids"]
        mask = device_full_width_mask(start, causal_block(count, lm.dtype, device), keys, count)
        with writing_at(layers, start + ranks):
            logits = _forward_outputs(lm, ids[None], adapter.cache, (start + ranks)[None], mask, 1, (), 0)[0]
        fed_from = start + count  # the root's position is fed_from - 1

        def feed(level: Level, fed_tokens: torch.Tensor) -> torch.Tensor:
            width = len(level.fed)
            at = fed_from + len(level.cached)
            level_mask = device_full_width_mask(at, tails[level.depth], keys, width)
            slots = at + torch.arange(width, device=device)
            with writing_at(layers, slots):
                return _forward_outputs(lm, fed_tokens[None], adapter.cache,
                                        (fed_from - 1 + level.depth).expand(1, width), level_mask, 0, (), 0)[0][0]

        tokens, probs = grow(adapter.plan, ids[-1], logits[0, -1], choose, feed)
        carried = probs[1] is not None  # drawn children carry q (the top-k convention's do not)
        return (torch.stack(tokens), torch.stack(probs[1:])) if carried else (torch.stack(tokens),)

    forwards = 1 + sum(1 for level in adapter.plan.levels if level.fed)
    with ctx.counters.phase("drafter"):
        outputs = adapter.graphs.run_block(key, adapter.cache, past, draft_length(adapter, count), {"ids": unseen},
                                           body, forwards=forwards, generator=choose_generator(ctx, sampled))
    _charge(adapter, ctx, count)
    tokens = outputs[0]
    return tokens, [None, *outputs[1].unbind()] if len(outputs) > 1 else [None] * len(adapter.plan.parents)


def choose_generator(ctx: StepContext, sampled: bool) -> torch.Generator | None:
    """The generator the block draws from (registered with its graph at capture): none when nothing is sampled."""
    return ctx.graph_generator() if sampled else None


def _charge(adapter: DraftLMAdapter, ctx: StepContext, count: int) -> None:
    """The block's forwards booked as the eager draft books them: the catch-up (its last position drafts depth
    1), then each level's fed nodes."""
    lm, tally = adapter.draft, ctx.counters.drafter
    flops = count_forward(lm, tally, count, adapter.cached_len, 1)
    book_drafting_forward(ctx.counters, adapter.work, flops, count)
    cached = adapter.cached_len + count
    for level in adapter.plan.levels:
        if level.fed:
            width = len(level.fed)
            adapter.work.charge(list(level.fed), count_forward(lm, tally, width, cached + len(level.cached), width))
