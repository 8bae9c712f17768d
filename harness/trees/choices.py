"""Static draft trees given as tree choices (Medusa's ``medusa_choices``, EAGLE-1's ``mc_sim_7b_63``).

A choice is a path of ranks from the root: ``(2,)`` is the root's child drawn from the 3rd most likely token of
the depth-1 distribution, ``(2, 0)`` that node's child from the most likely token of the depth-2 distribution read
at it. A choice set is prefix-closed (every choice's parent path is a choice too) and is laid out as Medusa lays it
out: sorted by (length, path), so the nodes of a depth are contiguous and grouped by parent in parent order.

``calibrated_choices`` builds Medusa's calibrated tree from each head's accuracy at each rank on held-out data
(``accuracy[d][i]``: how often the (i+1)-th token of the depth-(d+1) distribution is the target's): the ``nodes``
paths of highest estimated acceptance prod_d accuracy[d][path[d]], added best first, so every path's parent comes
before it (its estimate is at least the child's; ties go to the shorter, then the lexicographically smaller path).
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from pathlib import Path

from harness.errors import DraftcountError

Choice = tuple[int, ...]


@dataclass(frozen=True)
class ChoiceLevel:
    """The nodes of one depth d >= 1: which nodes of depth d - 1 have children here (``parent_nodes``, node ids in
    order), per child the row of its parent among them (``child_rows``) and its rank (``ranks``)."""

    parent_nodes: tuple[int, ...]
    child_rows: tuple[int, ...]
    ranks: tuple[int, ...]

    @property
    def top(self) -> int:
        """How many of a distribution's best tokens this depth reads."""
        return max(self.ranks) + 1


@dataclass(frozen=True)
class ChoiceTree:
    """A choice set laid out as a tree: node 0 the root, node i > 0 ``choices[i - 1]``."""

    choices: tuple[Choice, ...]
    parents: tuple[int, ...]
    levels: tuple[ChoiceLevel, ...]  # depth 1 first

    @property
    def depth(self) -> int:
        return len(self.levels)

    @property
    def nodes(self) -> int:
        """Draft nodes (the root excluded)."""
        return len(self.choices)


def choice_tree(choices: list[Choice] | tuple[Choice, ...], label: str = "tree choices") -> ChoiceTree:
    """Lay a prefix-closed choice set out as a tree (see the module docstring); a malformed one is one line."""
    paths = sorted({tuple(choice) for choice in choices}, key=lambda path: (len(path), path))
    if not paths:
        raise DraftcountError(f"{label}: no choices")
    if len(paths) != len(choices):
        raise DraftcountError(f"{label}: a choice is listed twice")
    if any(not path or any(not isinstance(rank, int) or rank < 0 for rank in path) for path in paths):
        raise DraftcountError(f"{label}: every choice must be a non-empty list of ranks >= 0")
    node_of = {path: node for node, path in enumerate(paths, start=1)}
    orphans = [path for path in paths if len(path) > 1 and path[:-1] not in node_of]
    if orphans:
        raise DraftcountError(f"{label}: choice {list(orphans[0])} has no parent choice {list(orphans[0][:-1])}")
    parents = (-1, *(node_of.get(path[:-1], 0) for path in paths))
    levels = []
    for depth in range(1, len(paths[-1]) + 1):
        level = [path for path in paths if len(path) == depth]
        parent_nodes = tuple(dict.fromkeys(node_of.get(path[:-1], 0) for path in level))
        row_of = {node: row for row, node in enumerate(parent_nodes)}
        levels.append(ChoiceLevel(parent_nodes, tuple(row_of[node_of.get(path[:-1], 0)] for path in level),
                                  tuple(path[-1] for path in level)))
    return ChoiceTree(tuple(paths), parents, tuple(levels))


def read_choices(path: str | Path) -> ChoiceTree:
    """A choice set from a JSON file holding Medusa's format, a list of rank lists (``[[0], [0, 0], [1], ...]``)."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DraftcountError(f"no tree-choices file {path}") from None
    except ValueError as error:
        raise DraftcountError(f"{path} is not JSON: {error}") from None
    if not isinstance(raw, list) or not all(isinstance(choice, list) for choice in raw):
        raise DraftcountError(f"{path}: tree choices must be a JSON list of rank lists, e.g. [[0], [0, 0], [1]]")
    return choice_tree([tuple(choice) for choice in raw], str(path))


def calibrated_choices(accuracy: list[list[float]], nodes: int, depth: int) -> ChoiceTree:
    """Medusa's calibrated tree of ``nodes`` nodes at most ``depth`` deep from per-depth, per-rank accuracies (see
    the module docstring)."""
    depth = min(depth, len(accuracy))
    if nodes < 1 or depth < 1 or not accuracy[0]:
        raise DraftcountError(f"a calibrated tree needs nodes, depth and accuracies, got {nodes}, {depth}")
    frontier = [(-float(estimate), 1, (rank,)) for rank, estimate in enumerate(accuracy[0])]
    heapq.heapify(frontier)
    chosen: list[Choice] = []
    while frontier and len(chosen) < nodes:
        negative, length, path = heapq.heappop(frontier)
        chosen.append(path)
        if length < depth:
            for rank, estimate in enumerate(accuracy[length]):
                heapq.heappush(frontier, (negative * float(estimate), length + 1, (*path, rank)))
    return choice_tree(chosen)
