"""`eagle`: EAGLE-2 dynamic draft trees over an EAGLE head (Li et al. 2024; EAGLE-3 feature fusion as an option).

adapter: drafting and committing; head: the network (official EAGLE-1/2 checkpoint layout); training: its
trainer; cost: its cost model for the 8B-shape projection.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError
from harness.trees.beam_shape import BeamOptions


@dataclass(frozen=True)
class EagleOptions(BeamOptions):
    """The beam tree's shape (top_k, depth, budget, shape_file); the head's fusion comes with the drafter.
    ``parallel`` k > 0: P-EAGLE, a chain of k drafted by one forward of a head trained for it (the tree options are
    then unused)."""

    parallel: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.parallel < 0 or self.parallel == 1:
            raise DraftcountError(f"option 'parallel' of method 'eagle' must be 0 (EAGLE-2 trees) or >= 2 (P-EAGLE's "
                                  f"chain of k from one forward), got {self.parallel}")
