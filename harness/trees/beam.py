"""Beam-grown draft trees: EAGLE-2's expand-and-rerank, shared by `eagle` and `lyanna`.

Depth 1 takes the top-k tokens of the root's draft distribution. At every
further depth the frontier (the k best nodes of the previous depth) is
expanded: each frontier node gets its top-k children, scored by cumulative
log-probability (parent's score + the child's log-probability), and the k best
of those k*k candidates become the next frontier. Every candidate of every
depth joins a pool; the final tree is the ``budget`` best pool nodes by score.
A child never scores above its parent, and ties go to the earlier pool node
(pool order is depth-major, so the shallower one), so the chosen set always
contains its own ancestors: it is a tree.

The whole growth runs where the drafter's log-probabilities live, with fixed
shapes (k frontier nodes at every depth, ``budget`` nodes in the tree), so on
a GPU it queues kernels without waiting for them, and the tree it returns is a
``DeferredTree``: its shape reaches the host in the verifier's one read, with
the verdict (and with the pool indices the drafter's bookkeeping needs).

A drafter with a draft vocabulary (``harness.training.draft_vocab``) hands its
log-probabilities over that vocabulary and its ``token_ids`` (draft index ->
target id): the top-k run over its N tokens and the tree holds target ids, so
a token outside it is never drafted; with N < top_k, k is N.

Children are deterministic top-k choices (no draft distribution is attached),
so the shared verifier treats them as q = 1 on the chosen token, which keeps
sampling lossless (EAGLE's convention).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

import torch

from harness.trees.beam_shape import BeamShape
from harness.trees.tree import DeferredTree


@dataclass(frozen=True)
class Frontier:
    """The nodes of one depth that get expanded, in rank order (best first), on the drafter's device.

    depth: their tree depth (1 = the root's children).
    tokens: (k,) their tokens.
    parent_rows: (k,) each node's parent's row in the previous depth's frontier (zeros at depth 1: the root).
    """

    depth: int
    tokens: torch.Tensor
    parent_rows: torch.Tensor


# expand(frontier) -> (k, V) log-probabilities of the frontier nodes' children, on the drafter's device.
Expand = Callable[[Frontier], torch.Tensor]


@dataclass
class BeamTree:
    """A grown tree and where its nodes came from.

    parent_slots: per tree node, the (depth, row) of its parent among the expanded frontiers; None for the
        root and for the root's children. Filled, with pool_of_node, when the tree's shape has been read.
    pool_tokens / pool_scores / pool_parents: every candidate of the round (pool order, on the device;
        pool_parents holds pool indices, -1 for the root's children); pool_of_node: tree node -> pool index
        (-1 for the root).
    """

    tree: DeferredTree | None
    parent_slots: list[tuple[int, int] | None]
    pool_of_node: list[int]
    pool_tokens: torch.Tensor
    pool_scores: torch.Tensor
    pool_parents: torch.Tensor


def _top(logprobs: torch.Tensor, k: int, token_ids: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best log-probabilities of each row and their tokens (target ids: through ``token_ids``)."""
    scores, index = logprobs.float().topk(k, dim=-1)
    return scores, index if token_ids is None else token_ids[index]


def _ranked(scores: torch.Tensor) -> torch.Tensor:
    """Indices of ``scores`` best first; equal scores keep their order (the earlier pool node first)."""
    return torch.sort(scores, descending=True, stable=True).indices


def grow_beam_tree(root: torch.Tensor, root_logprobs: torch.Tensor, expand: Expand, shape: BeamShape,
                   token_ids: torch.Tensor | None = None) -> BeamTree:
    """Grow a tree below ``root`` from its children's log-probabilities (V,) and ``expand`` for deeper levels
    (over a draft vocabulary: its ``token_ids``, see the module docstring).

    Nothing is read on the host here (see the module docstring)."""
    return grow_beam_trees([root], root_logprobs[None], lambda frontiers: [expand(frontiers[0])], shape,
                           token_ids)[0]


def grow_beam_trees(roots: list[torch.Tensor], root_logprobs: torch.Tensor,
                    expand_rows: Callable[[list[Frontier]], list[torch.Tensor]], shape: BeamShape,
                    token_ids: torch.Tensor | None = None) -> list[BeamTree]:
    """One tree per row of a static batch, grown in lockstep: ``root_logprobs`` (B, V); ``expand_rows`` takes
    every row's frontier of one depth (all rows reach each depth together: one shape) and returns each row's
    children's log-probabilities (k, V), so a drafter expands the whole batch in one forward per depth. Each row's
    tree is the one ``grow_beam_tree`` grows from that row alone (``beam_growth``)."""
    growths = [beam_growth(root, logprobs, shape, token_ids) for root, logprobs in zip(roots, root_logprobs)]
    trees: list[BeamTree | None] = [None] * len(growths)
    frontiers = [_advance(growth, None, trees, index) for index, growth in enumerate(growths)]
    while all(frontier is not None for frontier in frontiers):
        children = expand_rows(frontiers)
        frontiers = [_advance(growth, child, trees, index)
                     for index, (growth, child) in enumerate(zip(growths, children))]
    return trees


def _advance(growth: Generator[Frontier, torch.Tensor, BeamTree], child: torch.Tensor | None,
             trees: list[BeamTree | None], index: int) -> Frontier | None:
    """The growth's next frontier after sending it ``child`` (None: start it); None once it has returned its tree
    (stored at ``trees[index]``)."""
    try:
        return next(growth) if child is None else growth.send(child)
    except StopIteration as done:
        trees[index] = done.value
        return None


def beam_growth(root: torch.Tensor, root_logprobs: torch.Tensor, shape: BeamShape,
                token_ids: torch.Tensor | None = None) -> Generator[Frontier, torch.Tensor, BeamTree]:
    """The growth of one tree (see the module docstring) as a generator: it yields each frontier to expand, is
    sent that frontier's children's log-probabilities (k, V), and returns the tree."""
    device = root_logprobs.device
    k = min(shape.top_k, root_logprobs.shape[-1])
    ids = token_ids.to(device) if token_ids is not None else None
    scores, tokens = _top(root_logprobs, k, ids)
    pool_scores, pool_tokens = [scores], [tokens]
    pool_parents = [torch.full((k,), -1, dtype=torch.long, device=device)]
    pool_depths = [torch.full((k,), 1, dtype=torch.long, device=device)]
    frontier = Frontier(1, tokens, torch.zeros(k, dtype=torch.long, device=device))
    frontier_pool, frontier_scores = torch.arange(k, device=device), scores
    expanded: list[torch.Tensor] = []  # pool indices of each expanded frontier
    offset = k
    for depth in range(2, shape.depth + 1):
        expanded.append(frontier_pool)
        child_logprobs, child_tokens = _top((yield frontier), k, ids)
        candidate_scores = (frontier_scores[:, None] + child_logprobs).reshape(-1)
        candidate_tokens = child_tokens.reshape(-1)
        pool_scores.append(candidate_scores)
        pool_tokens.append(candidate_tokens)
        pool_parents.append(frontier_pool.repeat_interleave(k))
        pool_depths.append(torch.full((k * k,), depth, dtype=torch.long, device=device))
        best = _ranked(candidate_scores)[:k]
        frontier = Frontier(depth, candidate_tokens[best], torch.div(best, k, rounding_mode="floor"))
        frontier_pool, frontier_scores = offset + best, candidate_scores[best]
        offset += k * k
    all_scores, all_tokens, all_parents = torch.cat(pool_scores), torch.cat(pool_tokens), torch.cat(pool_parents)
    all_depths = torch.cat(pool_depths)
    chosen = _ranked(all_scores)[: shape.budget]
    chosen = chosen[torch.sort(all_depths[chosen], stable=True).indices]  # depth-major, rank within
    count = chosen.shape[0]
    node_of_pool = torch.zeros(all_scores.shape[0] + 1, dtype=torch.long, device=device)  # pool -1 -> the root
    node_of_pool[chosen + 1] = torch.arange(1, count + 1, device=device)
    root_parent = torch.full((1,), -1, dtype=torch.long, device=device)
    parents = torch.cat([root_parent, node_of_pool[all_parents[chosen] + 1]])
    depths = torch.cat([torch.zeros(1, dtype=torch.long, device=device), all_depths[chosen]])
    drafted = all_tokens[chosen].to(root.device)
    beam = BeamTree(tree=None, parent_slots=[], pool_of_node=[], pool_tokens=all_tokens, pool_scores=all_scores,
                    pool_parents=all_parents)

    def learn(values: list[int]) -> None:
        """The read's extra values: the chosen pool indices, then each expanded frontier's pool indices."""
        chosen_pool, frontier_pool = values[:count], values[count:]
        slot_of_pool = {pool: (1 + index // k, index % k) for index, pool in enumerate(frontier_pool)}
        beam.pool_of_node = [-1, *chosen_pool]
        beam.parent_slots = [None, *(slot_of_pool.get(beam.pool_of_node[parent]) if parent else None
                                     for parent in beam.tree.parents[1:])]

    beam.tree = DeferredTree(torch.cat([root.reshape(1).long(), drafted]), parents.to(root.device),
                             depths.to(root.device), shape.depth, torch.cat([chosen, *expanded]).to(root.device),
                             learn)
    return beam


def frontier_attention_bias(frontiers: list[Frontier], prefix_len: int, dtype: torch.dtype) -> torch.Tensor:
    """Mask (1, 1, k, prefix_len + d*k) for feeding the last of ``frontiers`` (depths 1..d, each k nodes) to a
    drafter whose cache holds a prefix and the earlier frontiers in order: each node sees the prefix, its
    ancestors and itself. Built on the frontiers' device."""
    newest = frontiers[-1]
    device, k, depth = newest.tokens.device, newest.tokens.shape[0], len(frontiers)
    bias = torch.full((k, prefix_len + depth * k), torch.finfo(dtype).min, dtype=dtype, device=device)
    bias[:, :prefix_len] = 0
    rows = torch.arange(k, device=device)
    visible = bias.new_zeros(())  # a device-side 0: writing a Python 0 by index copies it from the host and syncs
    ancestor = rows
    for level in range(depth, 0, -1):
        bias.index_put_((rows, prefix_len + (level - 1) * k + ancestor), visible)
        ancestor = frontiers[level - 1].parent_rows[ancestor]
    return bias[None, None]
