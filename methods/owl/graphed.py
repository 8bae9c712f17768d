"""`owl`'s LSTM tree as one CUDA graph: the LSTM's start from the target's last hidden state, its first step on the
root, every frontier's step and the beam's bookkeeping (top-k, ranking, the frontiers, the chosen tree) in one
``GraphedForwards.run_block`` over no cache (the LSTM keeps no KV cache: its states are the block's own tensors).

The block has one shape (the hidden state, the root, the beam shape), so one graph per adapter; what changes from
step to step (the hidden state, the root token) reaches it as device inputs. On the CPU (``capture=False``) the same
body runs eagerly and ``harness.measure.diagnostics.dispatch`` books it as inside a graph. The host's bookkeeping
(FLOPs, the useful-work ledger) follows from the shape alone, as ``OwlAdapter._lstm_tree`` books it. Left on the eager
path: the ``sampled`` drafting convention at T > 0, and HOWL's retrieved chains (no LSTM step runs then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from harness.engine.adapter import StepContext
from harness.engine.drafting import beam_block, beam_draws
from harness.trees.beam import Frontier, beam_tensors, beam_width, grow_beam_tree
from harness.trees.tree import TokenTree

if TYPE_CHECKING:
    from methods.owl.adapter import OwlAdapter

FIRST_STEP = ("first", 0)  # the DrafterWork unit of the LSTM's first step (the root's children), as the adapter's


def graphs_draft(adapter: OwlAdapter, ctx: StepContext) -> bool:
    """Whether this step's LSTM tree runs as one graphed block: a graph runner and top-k children."""
    return adapter.graphs is not None and beam_draws(ctx, adapter.shape) is None


def graphed_tree(adapter: OwlAdapter, ctx: StepContext, root: torch.Tensor) -> TokenTree:
    """``OwlAdapter._lstm_tree`` as one graphed block (``graphs_draft`` must hold)."""
    depth, k = adapter.shape.depth, beam_width(adapter.shape, adapter.drafter.draft_vocab.size)
    inputs = {"hidden": adapter.last_hidden, "root": root}
    adapter.beam = beam_block(adapter.graphs, ctx, ("owl", adapter.shape), inputs,
                              lambda buffers: _draft(adapter, buffers), depth, k)
    _book(adapter, ctx, depth, k)
    return adapter.beam.tree


def _book(adapter: OwlAdapter, ctx: StepContext, depth: int, k: int) -> None:
    """What ``OwlAdapter._step`` books per step, from the shape: the first step on the root's row, then each
    expanded frontier's k rows."""
    adapter.work.charge([FIRST_STEP], adapter.count_step(ctx, 1))
    for level in range(1, depth):
        adapter.work.charge([(level, row) for row in range(k)], adapter.count_step(ctx, k))


def _draft(adapter: OwlAdapter, buffers: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The block's body: the LSTM's start and first step on the root, the beam grown by its frontier steps; the
    beam's tensors."""
    lstm, root = adapter.drafter, buffers["root"]
    with torch.no_grad():
        start = lstm.start(buffers["hidden"][None])
    first, root_logprobs = adapter.lstm_step(start, root.reshape(1))
    states = [first]

    def expand(frontier: Frontier) -> torch.Tensor:
        stepped, logprobs = adapter.lstm_step(states[-1].rows(frontier.parent_rows), frontier.tokens)
        states.append(stepped)
        return logprobs

    beam = grow_beam_tree(root, root_logprobs[0], expand, adapter.shape, lstm.draft_vocab.token_map)
    return beam_tensors(beam)
