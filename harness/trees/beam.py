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

Two drafting conventions (``BeamShape.drafts``), the same at T = 0 (greedy: top-k):

- ``topk`` (EAGLE's): children are deterministic top-k choices (no draft distribution is attached), so the
  shared verifier treats them as q = 1 on the chosen token, which keeps sampling lossless.
- ``sampled`` (at T > 0, with ``BeamDraws``): every expanded node draws its k children without replacement from
  its warped distribution q (the exponential race, ``sample_from_probs``'s, kept to its k best: Gumbel-top-k), each
  child carrying q with its earlier siblings removed, verified by SpecInfer's multi-draft rule (as tree_sd's
  Sequoia trees). A node's own token must not decide whether it is in the tree (that would bias its draw), so the
  tree takes every expanded node's draws depth by depth, in a fixed order, until the budget (``sampled_quota``,
  ``sampled_order``); the scores still pick which of a depth's drawn nodes are expanded (the frontier: a parent's
  token may decide whether it has children). A chain (top_k 1) is sd's: one draw per depth, carrying its q.
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


@dataclass(frozen=True)
class BeamDraws:
    """What a beam needs to sample its drafts (the ``sampled`` convention at T > 0; ``harness.engine.drafting.
    beam_draws`` builds it from a step's context): ``warp`` turns log-probabilities (n, N) into the run's sampling
    distributions q (temperature, top-k, top-p), ``generator`` draws, ``vocab_size`` is the target's (q reaches the
    verifier over it: zero outside a draft vocabulary)."""

    warp: Callable[[torch.Tensor], torch.Tensor]
    generator: torch.Generator | None
    vocab_size: int


@dataclass
class BeamTree:
    """A grown tree and where its nodes came from.

    parent_slots: per tree node, the (depth, row) of its parent among the expanded frontiers; None for the
        root and for the root's children. Filled, with pool_of_node, when the tree's shape has been read.
    pool_tokens / pool_scores / pool_parents: every candidate of the round (pool order, on the device;
        pool_parents holds pool indices, -1 for the root's children); pool_of_node: tree node -> pool index
        (-1 for the root).
    pool_priority: what the tree's nodes were chosen by (the budget's highest): the scores (``topk``), or minus
        each candidate's place in the fixed order (``sampled``). The shape calibration ranks by it.
    """

    tree: DeferredTree | None
    parent_slots: list[tuple[int, int] | None]
    pool_of_node: list[int]
    pool_tokens: torch.Tensor
    pool_scores: torch.Tensor
    pool_parents: torch.Tensor
    pool_priority: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.pool_priority is None:
            self.pool_priority = self.pool_scores


def _top(logprobs: torch.Tensor, k: int, token_ids: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best log-probabilities of each row and their tokens (target ids: through ``token_ids``)."""
    scores, index = logprobs.float().topk(k, dim=-1)
    return scores, index if token_ids is None else token_ids[index]


def _ranked(scores: torch.Tensor) -> torch.Tensor:
    """Indices of ``scores`` best first; equal scores keep their order (the earlier pool node first)."""
    return torch.sort(scores, descending=True, stable=True).indices


def grow_beam_tree(root: torch.Tensor, root_logprobs: torch.Tensor, expand: Expand, shape: BeamShape,
                   token_ids: torch.Tensor | None = None, draws: BeamDraws | None = None) -> BeamTree:
    """Grow a tree below ``root`` from its children's log-probabilities (V,) and ``expand`` for deeper levels
    (over a draft vocabulary: its ``token_ids``, see the module docstring); ``draws``: sample the drafts (the
    ``sampled`` convention), else top-k.

    Nothing is read on the host here (see the module docstring)."""
    return grow_beam_trees([root], root_logprobs[None], lambda frontiers: [expand(frontiers[0])], shape,
                           token_ids, [draws])[0]


def grow_beam_trees(roots: list[torch.Tensor], root_logprobs: torch.Tensor,
                    expand_rows: Callable[[list[Frontier]], list[torch.Tensor]], shape: BeamShape,
                    token_ids: torch.Tensor | None = None,
                    draws: list[BeamDraws | None] | None = None) -> list[BeamTree]:
    """One tree per row of a static batch, grown in lockstep: ``root_logprobs`` (B, V); ``expand_rows`` takes
    every row's frontier of one depth (all rows reach each depth together: one shape) and returns each row's
    children's log-probabilities (k, V), so a drafter expands the whole batch in one forward per depth. Each row's
    tree is the one ``grow_beam_tree`` grows from that row alone (``beam_growth``, or with the row's ``draws``
    ``sampled_growth``)."""
    draws = draws or [None] * len(roots)
    growths = [beam_growth(root, logprobs, shape, token_ids) if draw is None
               else sampled_growth(root, logprobs, shape, token_ids, draw)
               for root, logprobs, draw in zip(roots, root_logprobs, draws)]
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


def beam_width(shape: BeamShape, vocab_size: int) -> int:
    """k: the beam's width, the top-k of its shape at most the (draft) vocabulary's size."""
    return min(shape.top_k, vocab_size)


def beam_growth(root: torch.Tensor, root_logprobs: torch.Tensor, shape: BeamShape,
                token_ids: torch.Tensor | None = None) -> Generator[Frontier, torch.Tensor, BeamTree]:
    """The growth of one tree (see the module docstring) as a generator: it yields each frontier to expand, is
    sent that frontier's children's log-probabilities (k, V), and returns the tree."""
    device = root_logprobs.device
    k = beam_width(shape, root_logprobs.shape[-1])
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
    all_scores, all_depths = torch.cat(pool_scores), torch.cat(pool_depths)
    chosen = _ranked(all_scores)[: shape.budget]
    chosen = chosen[torch.sort(all_depths[chosen], stable=True).indices]  # depth-major, rank within
    return assembled_beam(root, chosen, Pool(torch.cat(pool_tokens), all_scores, torch.cat(pool_parents), all_depths),
                          expanded, k, shape.depth)


@dataclass(frozen=True)
class Pool:
    """Every candidate of a round, in pool order, on the drafter's device (see ``BeamTree``)."""

    tokens: torch.Tensor
    scores: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    priority: torch.Tensor | None = None
    draft_probs: torch.Tensor | None = None  # (pool, V): each candidate's q (sampled drafts), None for top-k ones


def assembled_beam(root: torch.Tensor, chosen: torch.Tensor, pool: Pool, expanded: list[torch.Tensor], k: int,
                   max_depth: int) -> BeamTree:
    """The tree of the ``chosen`` pool nodes (depth-major, siblings in verification order) below ``root``, as a
    ``DeferredTree`` whose read also returns the chosen and the ``expanded`` frontiers' pool indices."""
    device = pool.tokens.device
    all_tokens, all_parents, all_depths = pool.tokens, pool.parents, pool.depths
    count = chosen.shape[0]
    node_of_pool = torch.zeros(all_tokens.shape[0] + 1, dtype=torch.long, device=device)  # pool -1 -> the root
    node_of_pool[chosen + 1] = torch.arange(1, count + 1, device=device)
    root_parent = torch.full((1,), -1, dtype=torch.long, device=device)
    parents = torch.cat([root_parent, node_of_pool[all_parents[chosen] + 1]])
    depths = torch.cat([torch.zeros(1, dtype=torch.long, device=device), all_depths[chosen]])
    drafted = all_tokens[chosen].to(root.device)
    beam = beam_from_tensors((torch.cat([root.reshape(1).long(), drafted]), parents.to(root.device),
                              depths.to(root.device), torch.cat([chosen, *expanded]).to(root.device), all_tokens,
                              pool.scores, all_parents, pool.scores if pool.priority is None else pool.priority),
                             k, max_depth)
    if pool.draft_probs is not None:
        beam.tree.draft_probs = [None, *pool.draft_probs[chosen].unbind(0)]
    return beam


BEAM_TENSORS = 8  # what ``beam_tensors`` returns


def beam_tensors(beam: BeamTree) -> tuple[torch.Tensor, ...]:
    """A top-k beam's device tensors, as ``beam_from_tensors`` takes them (a graphed draft's outputs)."""
    tree = beam.tree
    return (tree.tokens, tree.device_parents, tree.device_depths, tree.pending, beam.pool_tokens, beam.pool_scores,
            beam.pool_parents, beam.pool_priority)


def beam_from_tensors(tensors: tuple[torch.Tensor, ...], k: int, max_depth: int) -> BeamTree:
    """The ``BeamTree`` of (tree tokens, parents, depths, pending: the chosen then the expanded frontiers' pool
    indices, pool tokens, scores, parents, priority): its tree a ``DeferredTree`` whose read also returns the
    pending indices, from which the host learns each node's pool index and parent slot."""
    tokens, parents, depths, pending, pool_tokens, pool_scores, pool_parents, priority = tensors
    count = tokens.shape[0] - 1
    beam = BeamTree(tree=None, parent_slots=[], pool_of_node=[], pool_tokens=pool_tokens, pool_scores=pool_scores,
                    pool_parents=pool_parents, pool_priority=priority)

    def learn(values: list[int]) -> None:
        """The read's extra values: the chosen pool indices, then each expanded frontier's pool indices."""
        chosen_pool, frontier_pool = values[:count], values[count:]
        slot_of_pool = {pool: (1 + index // k, index % k) for index, pool in enumerate(frontier_pool)}
        beam.pool_of_node = [-1, *chosen_pool]
        beam.parent_slots = [None, *(slot_of_pool.get(beam.pool_of_node[parent]) if parent else None
                                     for parent in beam.tree.parents[1:])]

    beam.tree = DeferredTree(tokens, parents, depths, max_depth, pending, learn)
    return beam


def sampled_quota(shape: BeamShape, k: int) -> list[int]:
    """Draft nodes per depth of a sampled tree: the root's k draws, then each depth's k x k (its k frontier nodes'
    draws), until the budget or the depth runs out. Fixed by the shape alone: no node's token decides it."""
    quota, left = [], shape.budget
    for depth in range(1, shape.depth + 1):
        take = min(k if depth == 1 else k * k, left)
        if take <= 0:
            break
        quota.append(take)
        left -= take
    return quota


def sampled_order(k: int) -> list[int]:
    """The order a sampled tree takes one depth's k x k draws in (draw c of frontier row r at r * k + c): by
    r + c, then r, so each row's draws keep their draw order and the best rows' first draws come first."""
    return sorted(range(k * k), key=lambda index: (index // k + index % k, index // k))


def sampled_draws(logprobs: torch.Tensor, k: int, draws: BeamDraws,
                  token_ids: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """k draws without replacement from each row's warped distribution (``logprobs`` (n, N)): their tokens (n, k;
    target ids), their scores (n, k: the drafter's log-probability, -inf for a draw q gave no mass, which the
    verifier never accepts) and the q each was drawn from (n, k, V: the row's q with the earlier draws removed,
    zero once nothing is left), over the target's vocabulary."""
    probs = draws.warp(logprobs).float()
    races = torch.empty_like(probs).exponential_(generator=draws.generator)
    index = (probs / races).topk(k, dim=-1).indices  # the race's order: draws without replacement, first first
    taken, rows = torch.zeros_like(probs), []
    for draw in range(k):
        left = probs * (1.0 - taken)
        total = left.sum(dim=-1, keepdim=True)
        share = left / total.clamp_min(torch.finfo(left.dtype).tiny)
        rows.append(torch.where(total > 0, share, torch.zeros_like(left)))
        taken = taken.scatter(1, index[:, draw : draw + 1], 1.0)
    q = torch.stack(rows, dim=1)
    mass = q.gather(2, index[:, :, None])[..., 0]
    scores = torch.where(mass > 0, logprobs.float().gather(1, index), torch.full_like(mass, float("-inf")))
    if token_ids is not None:
        full = q.new_zeros((*q.shape[:2], draws.vocab_size))
        return token_ids[index], scores, full.index_copy_(2, token_ids, q)
    width = q.shape[-1]
    if width < draws.vocab_size:
        q = torch.cat([q, q.new_zeros((*q.shape[:2], draws.vocab_size - width))], dim=-1)
    return index, scores, q[..., : draws.vocab_size]


def sampled_growth(root: torch.Tensor, root_logprobs: torch.Tensor, shape: BeamShape,
                   token_ids: torch.Tensor | None, draws: BeamDraws) -> Generator[Frontier, torch.Tensor, BeamTree]:
    """``beam_growth`` for the ``sampled`` convention (see the module docstring): the same pool layout and
    frontiers (the k best-scoring of a depth's drawn nodes in the tree), the tree every draw the fixed order takes
    (``sampled_quota``, ``sampled_order``), each carrying its q."""
    device = root_logprobs.device
    k = beam_width(shape, root_logprobs.shape[-1])
    ids = token_ids.to(device) if token_ids is not None else None
    quota = sampled_quota(shape, k)
    order = torch.tensor(sampled_order(k), dtype=torch.long, device=device)
    tokens, scores, q = (part[0] for part in sampled_draws(root_logprobs[None], k, draws, ids))
    pool_tokens, pool_scores, pool_q = [tokens], [scores], [q]
    pool_parents = [torch.full((k,), -1, dtype=torch.long, device=device)]
    pool_depths = [torch.full((k,), 1, dtype=torch.long, device=device)]
    chosen = [torch.arange(quota[0], device=device)]
    places = [torch.arange(k, device=device)]  # each candidate's place in the fixed order (the pool's depth-major)
    best = _ranked(scores.clamp_min(torch.finfo(scores.dtype).min))[:k]
    frontier = Frontier(1, tokens[best], torch.zeros(k, dtype=torch.long, device=device))
    frontier_pool, frontier_scores = best, scores[best]
    expanded: list[torch.Tensor] = []
    offset = k
    for depth in range(2, len(quota) + 1):
        expanded.append(frontier_pool)
        child_tokens, child_scores, child_q = sampled_draws((yield frontier), k, draws, ids)
        candidate_scores = (frontier_scores[:, None] + child_scores).reshape(-1)
        candidate_tokens = child_tokens.reshape(-1)
        pool_tokens.append(candidate_tokens)
        pool_scores.append(candidate_scores)
        pool_q.append(child_q.reshape(k * k, -1))
        pool_parents.append(frontier_pool.repeat_interleave(k))
        pool_depths.append(torch.full((k * k,), depth, dtype=torch.long, device=device))
        included = order[: quota[depth - 1]]
        chosen.append(offset + included)
        places.append(offset + torch.argsort(order))
        eligible = torch.full_like(candidate_scores, float("-inf"))  # a frontier node is in the tree
        eligible[included] = candidate_scores[included].clamp_min(torch.finfo(candidate_scores.dtype).min)
        best = _ranked(eligible)[:k]
        frontier = Frontier(depth, candidate_tokens[best], torch.div(best, k, rounding_mode="floor"))
        frontier_pool, frontier_scores = offset + best, candidate_scores[best]
        offset += k * k
    pool = Pool(torch.cat(pool_tokens), torch.cat(pool_scores), torch.cat(pool_parents), torch.cat(pool_depths),
                -torch.cat(places).float(), torch.cat(pool_q))
    return assembled_beam(root, torch.cat(chosen), pool, expanded, k, shape.depth)


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
