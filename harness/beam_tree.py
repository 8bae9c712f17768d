"""Beam-grown draft trees: EAGLE-2's expand-and-rerank, shared by `eagle` and `lyanna`.

Depth 1 takes the top-k tokens of the root's draft distribution. At every
further depth the frontier (the k best nodes of the previous depth) is
expanded: each frontier node gets its top-k children, scored by cumulative
log-probability (parent's score + the child's log-probability), and the k best
of those k*k candidates become the next frontier. Every candidate of every
depth joins a pool; the final tree is the ``budget`` best pool nodes by score.
A child never scores above its parent, and ties go to the shallower node, so
the chosen set always contains its own ancestors: it is a tree.

Children are deterministic top-k choices (no draft distribution is attached),
so the shared verifier treats them as q = 1 on the chosen token, which keeps
sampling lossless (EAGLE's convention).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.errors import DraftcountError
from harness.tree import TokenTree


@dataclass(frozen=True)
class BeamShape:
    top_k: int = 4
    depth: int = 5
    budget: int = 24

    def __post_init__(self) -> None:
        if self.top_k < 1 or self.depth < 1 or self.budget < 1:
            raise DraftcountError(
                f"beam tree needs top_k, depth and budget >= 1, got {self.top_k}, {self.depth}, {self.budget}"
            )

    @property
    def pool_size(self) -> int:
        return self.top_k + (self.depth - 1) * self.top_k * self.top_k

    @property
    def max_nodes(self) -> int:
        return min(self.budget, self.pool_size)


@dataclass
class BeamPool:
    """Every candidate drafted in one round (pool index order), and which were expanded."""

    tokens: list[int]
    parents: list[int]  # pool index of the parent, -1 for children of the root
    scores: list[float]
    depths: list[int]
    expanded: list[list[int]]  # per depth from 1: the pool nodes whose children were computed


# expand(depth, frontier, pool) -> (len(frontier), V) log-probabilities of the frontier nodes' children.
# ``depth`` is the frontier's depth (1 = children of the root); frontier items are indices into ``pool``.
Expand = Callable[[int, list[int], BeamPool], torch.Tensor]


@dataclass
class BeamTree:
    tree: TokenTree
    pool: BeamPool
    pool_of_node: list[int]  # tree node -> pool index (-1 for the root)


def grow_beam_tree(root: torch.Tensor, root_logprobs: torch.Tensor, expand: Expand, shape: BeamShape) -> BeamTree:
    """Grow a tree below ``root`` from its children's log-probabilities (V,) and ``expand`` for deeper levels.

    Host reads: one per depth (the top-k scores and tokens of the whole frontier, read together); the root
    token stays on its device."""
    pool = BeamPool(tokens=[], parents=[], scores=[], depths=[], expanded=[])
    frontier = _add_children(pool, [-1], [0.0], root_logprobs[None], shape.top_k, depth=1)
    for depth in range(2, shape.depth + 1):
        if not frontier:
            break
        pool.expanded.append(frontier)
        rows = expand(depth - 1, frontier, pool)
        frontier = _add_children(pool, frontier, [pool.scores[node] for node in frontier], rows, shape.top_k, depth)
    order = sorted(range(len(pool.tokens)), key=lambda node: (-pool.scores[node], pool.depths[node], node))
    chosen = sorted(order[: shape.budget], key=lambda node: (pool.depths[node], -pool.scores[node], node))
    node_of_pool = {-1: 0}
    parents = [-1]
    for index, node in enumerate(chosen, start=1):
        node_of_pool[node] = index
        parents.append(node_of_pool[pool.parents[node]])
    drafted = torch.tensor([pool.tokens[node] for node in chosen], dtype=torch.long).to(root.device)
    tree = TokenTree(torch.cat([root.reshape(1).long(), drafted]), tuple(parents))
    return BeamTree(tree=tree, pool=pool, pool_of_node=[-1, *chosen])


def _add_children(pool: BeamPool, frontier: list[int], frontier_scores: list[float], logprobs: torch.Tensor,
                  top_k: int, depth: int) -> list[int]:
    """Add each frontier node's top-k children to the pool; return the k best new nodes (the next frontier).

    The top-k runs where ``logprobs`` lives; only the (frontier x k) log-probabilities and tokens reach the
    host, in one read (float64 holds every token id exactly)."""
    k = min(top_k, logprobs.shape[-1])
    child_logprobs, child_tokens = logprobs.float().topk(k, dim=-1)
    read_logprobs, read_tokens = torch.stack([child_logprobs.double(), child_tokens.double()]).tolist()
    new_nodes: list[tuple[float, int]] = []
    for row, parent in enumerate(frontier):
        for column in range(k):
            score = frontier_scores[row] + read_logprobs[row][column]
            if score == float("-inf"):  # a token the drafter cannot produce (outside a compressed vocabulary)
                continue
            pool.tokens.append(int(read_tokens[row][column]))
            pool.parents.append(parent)
            pool.scores.append(score)
            pool.depths.append(depth)
            new_nodes.append((score, len(pool.tokens) - 1))
    new_nodes.sort(key=lambda item: (-item[0], item[1]))
    return [node for _, node in new_nodes[:top_k]]
