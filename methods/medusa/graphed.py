"""`medusa`'s beam-grown draft as one CUDA graph: every head's logits and the beam's bookkeeping (top-k, ranking,
the frontiers, the chosen tree) in one ``GraphedForwards.run_block`` over no cache (the heads read only the target's
last hidden state and, Hydra's, the embeddings of the node's path).

The block has one shape (the hidden state, the root, the beam shape), so one graph per adapter; what changes from
step to step (the hidden state, the root token) reaches it as device inputs. On the CPU (``capture=False``) the same
body runs eagerly and ``harness.measure.diagnostics.dispatch`` books it as inside a graph. The host's bookkeeping
(FLOPs, the useful-work ledger) follows from the shape alone, as ``MedusaAdapter.propose`` books it. Left on the eager
path: a static choice tree (``choices``) and the ``sampled`` drafting convention at T > 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from harness.engine.adapter import StepContext
from harness.engine.drafting import beam_block, beam_draws
from harness.trees.beam import Frontier, beam_tensors, beam_width, grow_beam_tree
from harness.trees.tree import TokenTree

if TYPE_CHECKING:
    from methods.medusa.adapter import MedusaAdapter

FIRST_HEAD = ("head", 1)  # the DrafterWork unit of head 1 (the root's children), as the adapter's


def graphs_draft(adapter: MedusaAdapter, ctx: StepContext) -> bool:
    """Whether this step's draft runs as one graphed block: a graph runner, a beam (not a static choice tree),
    top-k children."""
    return adapter.graphs is not None and not adapter.static and beam_draws(ctx, adapter.shape) is None



def graphed_propose(adapter: MedusaAdapter, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
    """``MedusaAdapter.propose`` on a beam as one graphed block (``graphs_draft`` must hold)."""
    depth, k = adapter.shape.depth, beam_width(adapter.shape, adapter.heads.draft_vocab.size)
    inputs = {"hidden": adapter.last_hidden, "root": sequence[0, -1]}
    adapter.beam = beam_block(adapter.graphs, ctx, ("medusa", adapter.shape), inputs,
                              lambda buffers: _draft(adapter, buffers), depth, k)
    _book(adapter, ctx, depth, k)
    return adapter.beam.tree


def _book(adapter: MedusaAdapter, ctx: StepContext, depth: int, k: int) -> None:
    """What ``MedusaAdapter._head`` books per head call, from the shape: head 1 on the root's row, then head
    d + 1 on one row (Medusa) or on the depth-d frontier's k rows (Hydra)."""
    hydra = adapter.heads.arch.hydra
    adapter.work.charge([FIRST_HEAD], adapter.count_head(ctx, 1, 1))
    for level in range(1, depth):
        head, rows = level + 1, (k if hydra else 1)
        flops = adapter.count_head(ctx, head, rows)
        adapter.work.charge([(level, row) for row in range(rows)] if hydra else [("head", head)], flops)


def _draft(adapter: MedusaAdapter, buffers: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The block's body: head 1 on the root, the beam grown by the deeper heads; the beam's tensors."""
    hydra, root = adapter.heads.arch.hydra, buffers["root"]
    paths = [root.reshape(1, 1)]

    def head_logprobs(head: int, path: torch.Tensor | None, rows: int) -> torch.Tensor:
        return adapter.head_logprobs(head, buffers["hidden"], path, rows)

    def expand(frontier: Frontier) -> torch.Tensor:
        rows, head = frontier.tokens.shape[0], frontier.depth + 1
        if not hydra:
            return head_logprobs(head, None, 1).expand(rows, -1)
        paths.append(torch.cat([paths[-1].index_select(0, frontier.parent_rows), frontier.tokens[:, None]], 1))
        return head_logprobs(head, paths[-1], rows)

    beam = grow_beam_tree(root, head_logprobs(1, paths[0] if hydra else None, 1)[0], expand, adapter.shape,
                          adapter.heads.draft_vocab.token_map)
    return beam_tensors(beam)
