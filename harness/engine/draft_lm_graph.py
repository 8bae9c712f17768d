"""A draft LM's whole draft (sd, tree_sd: ``DraftLMAdapter``) as one CUDA graph per shape: the catch-up forward over
the tokens accepted last step, then every level of the expansion (``harness.engine.draft_lm_plan.grow``): the
children drawn (top-k, or sampled with their q at T > 0), the level's nodes fed at slots and under a tree mask
computed on the device, in one ``GraphedForwards.run_block``.

The block's shape is fixed by the catch-up's length (the accepted leaf and the bonus token in a step after the first, at
most depth + 1 tokens: one graph each), the tree shape, the drafting convention and the sampling settings; what changes
from step to step reaches it as device inputs (the catch-up's tokens, the draft cache's length ``past``). Each level's
mask over the tree's keys depends on the shape alone: made on the host once per shape and kept on the device. Sampled
children are drawn inside the block from ``StepContext.graph_generator`` (the run's generator on the CPU, in the eager
draft's order: the same tokens). On the CPU (``capture=False``) the same body runs eagerly and
``harness.measure.diagnostics.dispatch`` books it as inside a graph.

The host's FLOP booking follows from the shape and runs outside the block. A catch-up that cannot be graphed (a
prompt's first, over the whole prompt into an empty draft cache, or one longer than the runner graphs) runs on its
own, and the levels after it run as a block of their own (``graphed_levels``); a cache without room for the draft
runs eagerly.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Protocol

import torch
from transformers.cache_utils import Cache

from harness.backend.cuda_graphs import GraphedForwards, causal_block
from harness.backend.forward import count_forward, static_block_logits
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
    replacement: bool

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


def graphs_levels(adapter: DraftLMAdapter, prefix_len: int) -> bool:
    """Whether the levels alone run as one graphed block after a catch-up that ran on its own (a prompt's first,
    over the whole prompt) and left ``prefix_len`` positions in the draft cache: a graph runner, a static cache and
    room for every fed node."""
    graphs, layers = adapter.graphs, static_layers(adapter.cache)
    if graphs is None or layers is None or not adapter.plan.fed:
        return False
    return prefix_len + len(adapter.plan.fed) <= layers[0].capacity


def graphed_tokens(adapter: DraftLMAdapter, ctx: StepContext,
                   unseen: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """``DraftLMAdapter.propose``'s tokens (n,) and q's (None: deterministic) from one graphed block, the catch-up
    over ``unseen`` and every level (``graphs_draft`` must hold), the forwards charged as the eager draft charges
    them."""
    lm, count = adapter.draft, unseen.shape[0]

    def body(buffers: dict[str, torch.Tensor], start: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = static_block_logits(lm, adapter.cache, buffers["ids"], start, 1)
        return _levels(adapter, ctx, buffers["ids"][-1], logits[0, -1], start + count)

    outputs = _run(adapter, ctx, ("draft_lm", count), {"ids": unseen}, body, adapter.cached_len,
                   draft_length(adapter, count), 1)
    _charge_catch_up(adapter, ctx, count)
    _charge_levels(adapter, ctx, adapter.cached_len + count)
    return _unpacked(adapter, outputs)


def graphed_levels(adapter: DraftLMAdapter, ctx: StepContext, root: torch.Tensor, root_logits: torch.Tensor,
                   prefix_len: int) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """The levels alone as one graphed block (``graphs_levels`` must hold), after a catch-up that ran on its own and
    left ``prefix_len`` positions (the sequence, root included) in the draft cache."""
    outputs = _run(adapter, ctx, ("draft_lm_levels",), {"root": root, "logits": root_logits},
                   lambda buffers, start: _levels(adapter, ctx, buffers["root"], buffers["logits"], start),
                   prefix_len, prefix_len + len(adapter.plan.fed), 0)
    _charge_levels(adapter, ctx, prefix_len)
    return _unpacked(adapter, outputs)


def _run(adapter: DraftLMAdapter, ctx: StepContext, kind: tuple, inputs: dict[str, torch.Tensor], body,
         past: int, length: int, catch_up: int) -> tuple[torch.Tensor, ...]:
    """``body`` as one graphed block keyed by ``kind``, the shape, the chooser and the sampling settings (what the
    body bakes in), drawing from the graph generator when it samples."""
    sampled = not ctx.sampling.is_greedy
    settings = (ctx.sampling.temperature, ctx.sampling.top_k, ctx.sampling.top_p) if sampled else ()
    key = (*kind, adapter.plan.parents, adapter.chooser, adapter.replacement, ctx.target_vocab_size, settings)
    forwards = catch_up + sum(1 for level in adapter.plan.levels if level.fed)
    tails = tuple(level_tails(adapter.plan, adapter.draft.dtype, adapter.draft.device).values())
    with ctx.counters.phase("drafter"):
        return adapter.graphs.run_block(key, adapter.cache, past, length, inputs, body, forwards=forwards,
                                        generator=ctx.graph_generator() if sampled else None, keep=tails)


def _levels(adapter: DraftLMAdapter, ctx: StepContext, root: torch.Tensor, root_logits: torch.Tensor,
            fed_from: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Inside a block: every level grown from the root's logits (``grow``), its children drawn from the graph
    generator, its fed nodes at slots from ``fed_from`` (the draft cache's length after the root) under the level's
    tree mask; the tokens (n,), and the q's (n - 1, V) when the children carry them."""
    lm = adapter.draft
    tails = level_tails(adapter.plan, lm.dtype, lm.device)
    choose = adapter.choose(replace(ctx, generator=ctx.graph_generator()))

    def feed(level: Level, fed_tokens: torch.Tensor) -> torch.Tensor:  # every fed node at its depth's position
        depth = (fed_from - 1 + level.depth).expand(1, len(level.fed))
        return static_block_logits(lm, adapter.cache, fed_tokens, fed_from + len(level.cached), 0,
                                   tails[level.depth], depth)[0]

    tokens, probs = grow(adapter.plan, root, root_logits, choose, feed)
    carried = probs[1] is not None  # drawn children carry q (the top-k convention's do not)
    return (torch.stack(tokens), torch.stack(probs[1:])) if carried else (torch.stack(tokens),)


def _unpacked(adapter: DraftLMAdapter, outputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, list]:
    return outputs[0], [None, *outputs[1].unbind()] if len(outputs) > 1 else [None] * len(adapter.plan.parents)


def _charge_catch_up(adapter: DraftLMAdapter, ctx: StepContext, count: int) -> None:
    """The catch-up's forward booked as the eager draft books it (its last position drafts depth 1)."""
    flops = count_forward(adapter.draft, ctx.counters.drafter, count, adapter.cached_len, 1)
    book_drafting_forward(ctx.counters, adapter.work, flops, count)


def _charge_levels(adapter: DraftLMAdapter, ctx: StepContext, cached: int) -> None:
    """Each level's forward booked as the eager draft books it, the draft cache holding ``cached`` positions
    before the first level."""
    for level in adapter.plan.levels:
        if level.fed:
            width = len(level.fed)
            flops = count_forward(adapter.draft, ctx.counters.drafter, width, cached + len(level.cached), width)
            adapter.work.charge(list(level.fed), flops)
