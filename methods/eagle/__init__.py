"""`eagle`: EAGLE-2 dynamic draft trees over an EAGLE head (Li et al. 2024; EAGLE-3 feature fusion as an option).

adapter: drafting and committing; head: the network (official EAGLE-1/2 checkpoint layout); training: its
trainer; cost: its cost model for the 8B-shape projection.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.trees.beam_shape import BeamOptions


@dataclass(frozen=True)
class EagleOptions(BeamOptions):
    """The beam tree's shape alone (top_k, depth, budget, shape_file); the head's fusion comes with the drafter."""
