"""`stand`: STAND, stochastic adaptive n-gram drafting (Song et al. 2025, arXiv 2506.04708).

Model-free: no drafter model, no drafter FLOPs. See ``adapter.py`` for the drafting and ``tree_search.py`` for the
data-driven static tree (`python -m harness stand-tree`, the workflow's rule ``stand_tree``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import DraftcountError


@dataclass(frozen=True)
class StandOptions:
    max_n: int = 3  # longest n-gram context stored and looked up (backs off to 1)
    store_top_k: int = 10  # entries kept per stored distribution
    branching: tuple[int, ...] = (3, 2, 1, 1, 1, 1)  # the static tree without a tree_file: children per depth
    tree_file: str = ""  # a data-driven static tree (`python -m harness stand-tree`); overrides branching
    fill: Literal["path", "tree"] = "path"  # which verified nodes' target distributions enter the store
    keep_store: Literal["prompt", "generation", "run"] = "prompt"

    def __post_init__(self) -> None:
        if self.max_n < 1 or self.store_top_k < 1:
            raise DraftcountError(f"method 'stand' needs max_n >= 1 and store_top_k >= 1, got {self.max_n} "
                                  f"and {self.store_top_k}")
        if not self.branching or any(width < 1 for width in self.branching):
            raise DraftcountError(f"option 'branching' of method 'stand' needs widths >= 1, got {self.branching}")
