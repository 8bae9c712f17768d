"""Data-driven static trees (STAND): keep the nodes of a large shape that were accepted most often."""

from __future__ import annotations

from collections.abc import Sequence

from harness.trees.tree import depths_of


def prune_to_most_accepted(parents: Sequence[int], accepted: Sequence[int], nodes: int) -> tuple[int, ...]:
    """The ``nodes`` draft nodes of shape ``parents`` with the most acceptances, closed under ancestors (a
    node's count never exceeds its parent's, so ties go to the shallower, then earlier node), renumbered
    parents-first. Nodes never accepted are not kept, so the result may be smaller."""
    if len(accepted) != len(parents):
        raise ValueError(f"{len(accepted)} acceptance counts for a shape of {len(parents)} nodes")
    depths = depths_of(tuple(parents))
    ranked = sorted(range(1, len(parents)), key=lambda node: (-accepted[node], depths[node], node))
    kept: set[int] = {0}
    for node in ranked:
        if len(kept) > nodes or accepted[node] == 0:
            break
        if parents[node] in kept:
            kept.add(node)
    order = sorted(kept, key=lambda node: (depths[node], node))
    renumber = {node: index for index, node in enumerate(order)}
    return tuple(-1 if node == 0 else renumber[parents[node]] for node in order)
