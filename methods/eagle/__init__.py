"""`eagle`: EAGLE-2 dynamic draft trees over an EAGLE head (Li et al. 2024; EAGLE-3 feature fusion as an option).

adapter: drafting and committing; head: the network (official EAGLE-1/2 checkpoint layout); training: its
trainer; cost: its cost model for the 8B-shape projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import DraftcountError
from harness.trees.beam_shape import BeamOptions


@dataclass(frozen=True)
class EagleOptions(BeamOptions):
    """The beam tree's shape (top_k, depth, budget, shape_file); the head's fusion comes with the drafter.
    ``parallel`` k > 0: P-EAGLE, a chain of k drafted by one forward of a head trained for it (the tree options are
    then unused). ``visual_tokens`` on a vision-language target: ``keep`` (the head reads the image positions'
    hidden states too) or ``drop`` (HiViS: the head's context is the text positions alone, whose hidden states
    already attended to the image, so its prefill shrinks to the text)."""

    parallel: int = 0
    visual_tokens: Literal["keep", "drop"] = "keep"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.parallel and self.visual_tokens == "drop":
            raise DraftcountError("method 'eagle': visual_tokens=drop (HiViS) drafts trees; it does not combine with "
                                  "parallel (P-EAGLE)")
        if self.parallel < 0 or self.parallel == 1:
            raise DraftcountError(f"option 'parallel' of method 'eagle' must be 0 (EAGLE-2 trees) or >= 2 (P-EAGLE's "
                                  f"chain of k from one forward), got {self.parallel}")
