"""`owl`: OWL (Lee et al. 2025, arXiv 2510.07535): an LSTM drafter conditioned only on the target's last hidden
state, so its drafts and cost do not depend on the context length; HOWL, its hybrid with suffix matching, is the
option ``hybrid: suffix``.

model: the sum-LSTM (Arctic LSTM speculator equations); adapter: EAGLE-2 trees and HOWL's per-step choice;
training: its trainer on short windows; cost: its cost model for the 8B-shape projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import DraftcountError
from harness.trees.beam_shape import BeamOptions


@dataclass(frozen=True)
class OwlOptions(BeamOptions):
    hybrid: Literal["off", "suffix"] = "off"  # suffix: HOWL, a retrieved chain when its match scores >= threshold
    threshold: int = 3  # the suffix-match length (tokens) from which the retrieved chain is drafted
    min_n: int = 1  # shortest suffix matched in the context
    max_n: int = 8  # longest suffix matched (tried first); the score cannot exceed it
    max_draft: int = 16  # most tokens of a retrieved chain

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.min_n <= self.max_n:
            raise DraftcountError(f"method 'owl' needs 1 <= min_n <= max_n, got min_n={self.min_n} max_n={self.max_n}")
        if not self.min_n <= self.threshold <= self.max_n:
            raise DraftcountError(f"method 'owl' needs min_n <= threshold <= max_n, got threshold={self.threshold} "
                                  f"(min_n={self.min_n}, max_n={self.max_n})")
        if self.max_draft < 1:
            raise DraftcountError(f"option 'max_draft' of method 'owl' must be >= 1, got {self.max_draft}")
