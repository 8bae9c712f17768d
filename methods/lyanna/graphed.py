"""`lyanna`'s whole draft as one CUDA graph per shape: the backbone's catch-up over the accepted tokens' true
features, its single-state steps for depths 2..K, the states' logits, the previous round's logits (``reuse=logits``)
and the beam grown with the parent tokens' information, in one ``GraphedForwards.run_block``.

The block's shape is fixed by the catch-up's length (the accepted tokens plus one: 1 to K + 1, one graph each),
which also fixes how far the previous round's chain overlaps this one's (its logits for the positions both predict
are the first K - length rows of the previous chain's); what changes from step to step reaches the graph as device
inputs (the catch-up's inputs, the root token, the previous chain's log-probabilities, the backbone cache's length).
On the CPU (``capture=False``) the same body runs eagerly and ``harness.measure.diagnostics.dispatch`` books it as
inside a graph.

The host's bookkeeping (FLOPs, the useful-work ledger, the reuse counters) follows from the shape alone and runs
outside the block, as ``LyannaAdapter``'s eager path books it. Left on the eager path: a prompt's first catch-up
(an empty backbone cache), the ``sampled`` drafting convention at T > 0, ``reuse=states`` (kept cache entries),
``overlap=on`` (the run-ahead on a side stream) and unfused verification (the root's logits from the target).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from harness.backend.cuda_graphs import causal_block, device_full_width_mask, writing_at
from harness.backend.static_cache import static_layers
from harness.engine.adapter import StepContext
from harness.engine.counters import book_drafting_forward
from harness.engine.drafting import beam_draws
from harness.trees.beam import Frontier, beam_from_tensors, beam_tensors, beam_width, grow_beam_tree
from harness.trees.tree import TokenTree

if TYPE_CHECKING:
    from methods.lyanna.adapter import LyannaAdapter


def graphs_draft(adapter: LyannaAdapter, ctx: StepContext, count: int) -> bool:
    """Whether this step's draft runs as one graphed block: a graph runner and a static cache, a non-empty
    backbone cache, top-k children, fused verification, reuse off or of logits, no run-ahead,
    a previous chain of K states, and room in the cache for the catch-up and every single-state step."""
    graphs, options = adapter.graphs, adapter.options
    if graphs is None or static_layers(adapter.cache) is None or beam_draws(ctx, adapter.shape) is not None:
        return False
    if options.reuse == "states" or options.overlap == "on" or adapter.root_logits is not None:
        return False
    previous = adapter.previous  # the previous chain's log-probabilities, one row per depth (reuse=logits reads them)
    rows = None if previous is None or previous.stacked_logprobs is None else previous.stacked_logprobs.shape[0]
    if rows != adapter.shape.depth:
        return False
    if not graphs.graphs_forward(adapter.fed_len, count):
        return False
    return draft_length(adapter, count) <= static_layers(adapter.cache)[0].capacity


def draft_length(adapter: LyannaAdapter, count: int) -> int:
    """The backbone cache's length after the block: the prefix, the catch-up and the K - 1 single-state steps."""
    return adapter.fed_len + count + adapter.shape.depth - 1



def graphed_propose(adapter: LyannaAdapter, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
    """``LyannaAdapter.propose`` as one graphed block (``graphs_draft`` must hold)."""
    count, depth = adapter.pending.shape[0], adapter.shape.depth
    k = beam_width(adapter.shape, adapter.drafter.draft_vocab.size)
    first = sequence.shape[-1] - 1
    adapter.depth_positions = list(range(first, first + depth))
    previous = adapter.previous
    inputs = {"pending": adapter.pending, "root": sequence[0, -1], "previous": previous.stacked_logprobs}
    past, length = adapter.fed_len, draft_length(adapter, count)
    with ctx.counters.phase("drafter"):
        outputs = adapter.graphs.run_block(("lyanna", adapter.shape, adapter.options.reuse), adapter.cache, past,
                                           length, inputs, lambda buffers, start: _draft(adapter, buffers, start,
                                                                                         count), forwards=depth)
    tree_outputs, states, logprobs = outputs[:-2], outputs[-2], outputs[-1]
    _book(adapter, ctx, count, past, k)
    adapter.fed_len += count
    positions = adapter.depth_positions
    adapter.computed = set(positions)
    from methods.lyanna.adapter import _Chain  # here: the adapter imports this module

    adapter.chain = _Chain(states={p: states[row] for row, p in enumerate(positions)},
                           logprobs={p: logprobs[row] for row, p in enumerate(positions)}, stacked_logprobs=logprobs)
    if adapter.options.reuse == "logits":
        reused = sum(1 for p in positions if p in previous.logprobs)
        if reused:
            ctx.counters.add_extra("backbone_logits_reused", reused)
    adapter.beam = beam_from_tensors(tree_outputs, k, depth)
    return adapter.beam.tree


def _book(adapter: LyannaAdapter, ctx: StepContext, count: int, past: int, k: int) -> None:
    """The drafter work the eager path books, from the shape: the catch-up (its last position drafts depth 1),
    each single-state step, the states' logits and each depth's parent-token information."""
    cost, drafter, positions = adapter.cost, adapter.drafter, adapter.depth_positions
    flops = cost.forward_flops(count, past + count, 0)
    ctx.counters.drafter.add(count, flops)
    book_drafting_forward(ctx.counters, adapter.work, flops, count, ("state", positions[0]))
    for step, position in enumerate(positions[1:]):
        flops = cost.forward_flops(1, past + count + step + 1, 0)
        ctx.counters.drafter.add(1, flops)
        adapter.work.charge([("state", position)], flops)
    head = 2.0 * drafter.lm_head_rows.shape[0] * drafter.lm_head_rows.shape[1] * len(positions)
    adapter._book(ctx, [("state", p) for p in positions], head)
    for depth in range(1, len(positions) + 1):
        adapter._book(ctx, [("inject", depth)], drafter.injection_flops(1 if depth == 1 else k))


def _draft(adapter: LyannaAdapter, buffers: dict[str, torch.Tensor], past: torch.Tensor,
           count: int) -> tuple[torch.Tensor, ...]:
    """The block's body: the catch-up over ``count`` inputs at ``past``, K - 1 single-state steps, the logits and
    the beam, every forward at slots and under masks computed on the device. Returns the beam's tensors, then the
    chain's states (K, H) and log-probabilities (K, V)."""
    cache, drafter, options = adapter.cache, adapter.drafter, adapter.options
    depth = adapter.shape.depth
    layers = static_layers(cache)
    device, dtype = adapter.device, adapter.dtype
    keys = torch.arange(layers[0].capacity, device=device)
    slots = past + torch.arange(count, device=device)
    with writing_at(layers, slots):
        out = drafter(buffers["pending"][None], slots[None], cache,
                      device_full_width_mask(past, causal_block(count, dtype, device), keys, count))[0]
    states = [out[-1]]
    one = causal_block(1, dtype, device)
    for step in range(depth - 1):
        slot = (past + count + step).reshape(1)
        with writing_at(layers, slot):
            out = drafter(drafter.own_inputs(states[-1][None])[None], slot[None], cache,
                          device_full_width_mask(slot[0], one, keys, 1))[0]
        states.append(out[-1])
    stacked = torch.stack(states)
    base = drafter.state_logits(stacked)
    logprobs = torch.log_softmax(base.float(), dim=-1)
    extra = torch.zeros_like(logprobs)
    overlap = depth - count  # the previous chain predicted this chain's first K - count positions too
    if options.reuse == "logits" and overlap > 0:
        extra[:overlap] = options.reuse_weight * buffers["previous"][count:]

    def node_logprobs(level: int, parents: torch.Tensor) -> torch.Tensor:
        row = level - 1
        logits = drafter.node_logits(stacked[row], parents, base[row]).float()
        return torch.log_softmax(torch.log_softmax(logits, dim=-1) + extra[row], dim=-1)

    def expand(frontier: Frontier) -> torch.Tensor:
        return node_logprobs(frontier.depth + 1, frontier.tokens)

    root = buffers["root"]
    beam = grow_beam_tree(root, node_logprobs(1, root.reshape(1))[0], expand, adapter.shape,
                          drafter.draft_vocab.token_map)
    return (*beam_tensors(beam), stacked, logprobs)
