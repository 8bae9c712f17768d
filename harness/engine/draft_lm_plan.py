"""How a draft LM expands a fixed tree shape, level by level (``DraftLMAdapter``, sd and tree_sd): the plan, known
from the shape alone, and the one expansion loop the eager draft and the graphed draft
(``harness.engine.draft_lm_graph``) both run, each with its own way of feeding a level to the draft LM.

Each level draws the children of the nodes whose logits are known (the root's from the catch-up forward, later ones
from the level before), in the shape's order; the new nodes that have children of their own are then fed in one
forward, with a tree mask over the nodes fed before them. The tree's node numbering, the nodes fed per level and
each level's mask depend on the shape only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch

from harness.trees.tree import children_of, depths_of

Chooser = Callable[[torch.Tensor, int], list[tuple[torch.Tensor, torch.Tensor | None]]]  # (logits, count) -> pairs
LevelFeed = Callable[["Level", torch.Tensor], torch.Tensor]  # (level, its fed tokens (n,)) -> their logits (n, V)


@dataclass(frozen=True)
class Level:
    depth: int  # the depth of the nodes drawn at this level (1: the root's children)
    choices: tuple[tuple[int, int], ...]  # (tree node whose logits are read, how many children are drawn from them)
    fed: tuple[int, ...]  # the new nodes fed to the draft LM after the draw (those with children of their own)
    cached: tuple[int, ...]  # the tree nodes fed at earlier levels (in the draft cache, in this order)


@dataclass(frozen=True)
class ExpansionPlan:
    parents: tuple[int, ...]  # the drafted tree's parents, root -1, in the order the nodes are drawn
    levels: tuple[Level, ...]

    @property
    def fed(self) -> tuple[int, ...]:
        """Every node fed to the draft LM, in the order its cache holds them after the root."""
        return tuple(node for level in self.levels for node in level.fed)


@lru_cache(maxsize=64)
def expansion_plan(shape: tuple[int, ...]) -> ExpansionPlan:
    """The plan of expanding ``shape`` (a tree's parents, root -1), as ``grow`` runs it."""
    shape_children = children_of(shape)
    parents = [-1]
    frontier = [(0, 0)]  # (shape node, tree node)
    levels: list[Level] = []
    fed: list[int] = []
    for depth in range(1, max(depths_of(shape)) + 1):
        drawn, choices = [], []
        for shape_node, tree_node in frontier:
            kids = shape_children[shape_node]
            if kids:
                choices.append((tree_node, len(kids)))
            for kid in kids:
                parents.append(tree_node)
                drawn.append((kid, len(parents) - 1))
        frontier = drawn
        to_feed = tuple(tree_node for shape_node, tree_node in drawn if shape_children[shape_node])
        levels.append(Level(depth, tuple(choices), to_feed, tuple(fed)))
        if not to_feed:
            break
        fed.extend(to_feed)
    return ExpansionPlan(tuple(parents), tuple(levels))


def grow(plan: ExpansionPlan, root: torch.Tensor, root_logits: torch.Tensor, choose: Chooser,
         feed: LevelFeed) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """The drafted tree's tokens and the q each was drawn from (None: deterministic), root first: every level's
    children drawn by ``choose`` from their parent's logits, then its nodes with children fed by ``feed``."""
    tokens: list[torch.Tensor] = [root]
    probs: list[torch.Tensor | None] = [None]
    node_logits = {0: root_logits}
    for level in plan.levels:
        for node, count in level.choices:
            for token, q in choose(node_logits[node], count):
                tokens.append(token.to(root.device))
                probs.append(q)
        if level.fed:
            logits = feed(level, torch.stack([tokens[node] for node in level.fed]))
            node_logits.update({node: logits[index] for index, node in enumerate(level.fed)})
    return tokens, probs
