"""`eagle`'s whole draft as one CUDA graph per shape: the catch-up forward, the beam's expansions and the tree's
bookkeeping (top-k, ranking, the frontier masks, the chosen tree) in one ``GraphedForwards.run_block``.

The block's shape is fixed by the catch-up's length (1 to depth + 1 accepted tokens: one graph each) and the beam
shape; what changes from step to step reaches it as device inputs (the features, the tokens, the root, the head
cache's length ``past``), so on a GPU a step's drafting is a few input copies and one replay. On the CPU
(``capture=False``) the same body runs eagerly and ``harness.measure.diagnostics.dispatch`` books it as inside a graph.

The host's bookkeeping (FLOPs, the useful-work ledger) follows from the shape alone and runs outside the block. The
``sampled`` drafting convention at T > 0 (draws from the run's generator) and a prompt's first catch-up (an empty
head cache) stay on the eager path (``EagleAdapter.propose``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from harness.backend.cuda_graphs import causal_block, device_full_width_mask, writing_at
from harness.backend.static_cache import static_layers
from harness.engine.adapter import StepContext
from harness.engine.counters import book_drafting_forward
from harness.engine.drafting import beam_draws
from harness.trees.beam import (Frontier, beam_from_tensors, beam_tensors, beam_width, frontier_attention_bias,
                                grow_beam_tree)
from harness.trees.tree import TokenTree

if TYPE_CHECKING:
    from methods.eagle.adapter import EagleAdapter


def graphs_draft(adapter: EagleAdapter, ctx: StepContext, count: int) -> bool:
    """Whether this step's draft runs as one graphed block: a graph runner and a static cache, a non-empty head
    cache, deterministic (top-k) children, and room in the cache for the catch-up and every expansion."""
    graphs = adapter.graphs
    if graphs is None or static_layers(adapter.cache) is None or beam_draws(ctx, adapter.shape) is not None:
        return False
    return graphs.graphs_forward(adapter.fed_len, count) and draft_length(adapter, count) <= \
        static_layers(adapter.cache)[0].capacity



def draft_length(adapter: EagleAdapter, count: int) -> int:
    """The head cache's length after the block: the prefix, the catch-up and every expanded frontier."""
    return adapter.fed_len + count + (adapter.shape.depth - 1) * _width(adapter)


def _width(adapter: EagleAdapter) -> int:
    return beam_width(adapter.shape, adapter.head.draft_vocab.size)


def graphed_propose(adapter: EagleAdapter, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
    """``EagleAdapter.propose`` as one graphed block (``graphs_draft`` must hold)."""
    count, k, depth = adapter.pending.shape[0], _width(adapter), adapter.shape.depth
    tokens = adapter.head_tokens(sequence, adapter.fed_len + 1, count)
    inputs = {"features": adapter.pending, "tokens": tokens, "root": sequence[0, -1]}
    embeds = adapter.head_embeds(adapter.fed_len + 1, tokens)
    if embeds is not None:
        inputs["embeds"] = embeds
    past, length = adapter.fed_len, draft_length(adapter, count)
    with ctx.counters.phase("drafter"):
        outputs = adapter.graphs.run_block(("beam", adapter.shape), adapter.cache, past, length, inputs,
                                           lambda buffers, start: _draft(adapter, buffers, start, count),
                                           forwards=depth)
    cost = adapter.runner.cost
    flops = cost.forward_flops(count, past + count, 1)
    ctx.counters.drafter.add(count, flops)
    book_drafting_forward(ctx.counters, adapter.work, flops, count)  # its last position drafts depth 1
    adapter.fed_len += count
    for level in range(1, depth):  # the expansion of the depth-`level` frontier
        flops = cost.forward_flops(k, adapter.fed_len + level * k, k)
        ctx.counters.drafter.add(k, flops)
        adapter.work.charge([(level, row) for row in range(k)], flops)
    adapter.beam = beam_from_tensors(outputs, k, depth)
    return adapter.beam.tree


def _draft(adapter: EagleAdapter, buffers: dict[str, torch.Tensor], past: torch.Tensor,
           count: int) -> tuple[torch.Tensor, ...]:
    """The block's body: the catch-up over ``count`` pairs at ``past``, then the beam grown below the root, every
    forward at slots and under masks computed on the device."""
    cache, runner = adapter.cache, adapter.runner
    layers = static_layers(cache)
    device = runner.device
    keys = torch.arange(layers[0].capacity, device=device)
    ranks = torch.arange(count, device=device)
    head, _ = adapter.step_head(1)
    own = {"embeds": buffers["embeds"][None]} if "embeds" in buffers else {}
    mask = device_full_width_mask(past, causal_block(count, runner.dtype, device), keys, count)
    with writing_at(layers, past + ranks):
        hidden = head(buffers["features"][None], buffers["tokens"][None], (past + ranks)[None], cache, mask,
                      **own)[0]
    fed = past + count
    root_hidden = hidden[-1]
    outputs: list[torch.Tensor] = []
    frontiers: list[Frontier] = []

    def expand(frontier: Frontier) -> torch.Tensor:
        frontiers.append(frontier)
        k = frontier.tokens.shape[0]
        inputs = root_hidden.expand(k, -1) if not outputs else outputs[-1].index_select(0, frontier.parent_rows)
        start = fed + (frontier.depth - 1) * k
        tail = frontier_attention_bias(frontiers, 0, runner.dtype)[0, 0]  # the tree's part: the prefix is visible
        step, _ = adapter.step_head(frontier.depth + 1)
        with writing_at(layers, start + torch.arange(k, device=device)):
            out = step(inputs[None], frontier.tokens[None], (fed + frontier.depth - 1).expand(1, k), cache,
                       device_full_width_mask(start, tail, keys, k))[0]
        outputs.append(out)
        return runner.logprobs(out)

    beam = grow_beam_tree(buffers["root"], runner.logprobs(root_hidden), expand, adapter.shape, runner.token_map)
    return beam_tensors(beam)
