"""`prism`: PRISM (Wang et al., MLSys 2026, arXiv 2602.01762) -- M EAGLE-1/2 modules over one shared KV cache, draft
step k run by module f_map(k), in EAGLE-2 beam trees.

head: the drafter and its step-to-module map; checkpoint: its directory; adapter: EAGLE's adapter with a
step-aware head; training: the two-phase trainer (one module with EAGLE's loss, then M copies with module switching
over unrolled steps). A step costs what an EAGLE head step costs, so the projection reuses EAGLE's cost model.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.trees.beam_shape import BeamOptions


@dataclass(frozen=True)
class PrismOptions(BeamOptions):
    """The beam tree's shape alone (top_k, depth, budget, shape_file); f_map comes with the drafter."""
