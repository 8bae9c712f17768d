"""Static tree shapes chosen by dynamic programming (Sequoia, Chen et al. 2024).

Positional acceptance model: acceptance[k] is the probability that the k-th
ranked child of a node (k = 0 first) is the one verification accepts. A node's
chance of being accepted is the product of its ranks' probabilities along its
path, and the expected number of tokens a step yields is 1 (the token the
target always adds) plus the sum of that over all draft nodes. For a budget of
n draft nodes (and optionally a depth limit) ``optimal_tree`` returns the shape
that maximises it; ``choose_budget`` weighs that against measured latencies.

A shape is a parents tuple (node 0 the root, -1) whose siblings are listed in
rank order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from harness.errors import DraftcountError
from harness.trees.tree import depths_of


def expected_tokens(parents: Sequence[int], acceptance: Sequence[float]) -> float:
    """1 + sum over draft nodes of the product of their ranks' acceptance along the path."""
    value = [1.0] * len(parents)
    rank_counter: dict[int, int] = {}
    total = 1.0
    for node in range(1, len(parents)):
        parent = parents[node]
        rank = rank_counter.get(parent, 0)
        rank_counter[parent] = rank + 1
        probability = acceptance[rank] if rank < len(acceptance) else 0.0
        value[node] = value[parent] * probability
        total += value[node]
    return total


@dataclass(frozen=True)
class TreeShape:
    parents: tuple[int, ...]
    expected_tokens: float

    @property
    def draft_nodes(self) -> int:
        return len(self.parents) - 1

    @property
    def depth(self) -> int:
        return max(depths_of(self.parents))


def optimal_tree(acceptance: Sequence[float], budget: int, max_depth: int | None = None) -> TreeShape:
    """The shape with at most ``budget`` draft nodes (depth <= ``max_depth``) maximising expected tokens."""
    if budget < 0:
        raise DraftcountError(f"tree budget must be >= 0, got {budget}")
    probabilities = tuple(float(p) for p in acceptance)
    if any(not 0.0 <= p <= 1.0 for p in probabilities):
        raise DraftcountError("acceptance probabilities must lie in [0, 1]")
    depth = budget if max_depth is None else min(max_depth, budget)
    solver = _Solver(probabilities)
    nested = solver.subtree(budget + 1, depth)[1]
    parents = _flatten(nested)
    return TreeShape(parents=parents, expected_tokens=expected_tokens(parents, probabilities))


class _Solver:
    """subtree(n, d): best (score, children) of a subtree with at most n nodes (root included), depth <= d."""

    def __init__(self, acceptance: tuple[float, ...]) -> None:
        self.acceptance = acceptance
        self.subtree = lru_cache(maxsize=None)(self._subtree)
        self.children = lru_cache(maxsize=None)(self._children)

    def _subtree(self, nodes: int, depth: int) -> tuple[float, tuple]:
        if nodes <= 1 or depth == 0:
            return 1.0, ()
        score, kids = self.children(nodes - 1, 0, depth - 1)
        return 1.0 + score, kids

    def _children(self, nodes: int, rank: int, depth: int) -> tuple[float, tuple]:
        """Best use of ``nodes`` nodes by children of rank >= ``rank`` whose subtrees have depth <= ``depth``."""
        if nodes == 0 or rank >= len(self.acceptance) or self.acceptance[rank] == 0.0:
            return 0.0, ()
        best: tuple[float, tuple] = (0.0, ())
        for size in range(1, nodes + 1):
            child_score, child_kids = self.subtree(size, depth)
            rest_score, rest = self.children(nodes - size, rank + 1, depth)
            score = self.acceptance[rank] * child_score + rest_score
            if score > best[0] + 1e-12:
                best = (score, (child_kids, *rest))
        return best


def _flatten(children: tuple) -> tuple[int, ...]:
    """Nested children tuples -> breadth-first parents tuple (siblings in rank order)."""
    parents = [-1]
    queue = [(0, children)]
    while queue:
        next_queue = []
        for node, kids in queue:
            for kid in kids:
                parents.append(node)
                next_queue.append((len(parents) - 1, kid))
        queue = next_queue
    return tuple(parents)


def choose_budget(acceptance: Sequence[float], target_latency: Mapping[int, float], draft_step_latency: float,
                  max_depth: int | None = None) -> tuple[TreeShape, dict[int, float]]:
    """Pick the budget maximising expected tokens per second of one step.

    ``target_latency[n]``: measured seconds of a target forward over n tree
    tokens (root included); ``draft_step_latency``: seconds of one drafter
    forward (one per tree depth). Returns the best shape and the estimated
    tokens/s for every measured budget.
    """
    if not target_latency:
        raise DraftcountError("no target latencies were measured")
    rates: dict[int, float] = {}
    best: tuple[float, TreeShape] | None = None
    for tree_tokens, latency in sorted(target_latency.items()):
        shape = optimal_tree(acceptance, tree_tokens - 1, max_depth)
        seconds = latency + shape.depth * draft_step_latency
        rates[tree_tokens - 1] = shape.expected_tokens / seconds
        if best is None or rates[tree_tokens - 1] > best[0]:
            best = (rates[tree_tokens - 1], shape)
    assert best is not None
    return best[1], rates


def branching_shape(branching: Sequence[int]) -> tuple[int, ...]:
    """SpecInfer-style fixed expansion: every node at depth d gets branching[d] children."""
    if not branching or any(width < 1 for width in branching):
        raise DraftcountError(f"branching must be a non-empty list of positive widths, got {list(branching)}")
    parents, frontier = [-1], [0]
    for width in branching:
        next_frontier = []
        for node in frontier:
            for _ in range(width):
                parents.append(node)
                next_frontier.append(len(parents) - 1)
        frontier = next_frontier
    return tuple(parents)
