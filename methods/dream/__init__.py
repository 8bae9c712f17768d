"""`dream`: DREAM (Hu et al., NeurIPS 2025, arXiv 2505.19201; code SAI-Lab-NYU/DREAM) -- a three-layer drafter whose
middle layer cross-attends to the target's features through tanh gates, drafting EAGLE-2 trees; on a
vision-language target its context keeps the text and the most attended share of the image's positions.

head: the network; checkpoint: its directory; adapter: EAGLE's adapter (catch-up, beam tree, shared verifier) over
it, with visual-token compression; training: EAGLE's regression and soft cross-entropy plus the middle layer's
regression onto the target layer of least attention entropy; cost: its cost model for the projection.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError
from harness.trees.beam_shape import BeamOptions


@dataclass(frozen=True)
class DreamOptions(BeamOptions):
    """The beam tree's shape (top_k, depth, budget, shape_file; DREAM's paper runs top_k 8, depth 5, 63 nodes: our
    defaults are the other beam drafters', so that they compare at one tree size) and ``visual_keep``: on a
    vision-language target, the share of the image's positions the drafter keeps in its context, those the
    target's last layer attends to most (DREAM's ``keep_ratio``, 0.7); 1 keeps them all."""

    visual_keep: float = 0.7

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.visual_keep <= 1.0:
            raise DraftcountError(f"option 'visual_keep' of method 'dream' must be in (0, 1], got {self.visual_keep}")
