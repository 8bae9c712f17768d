"""`lyanna`: the paper's hidden-state drafter ("Make Every Draft Count", arXiv 2602.21224).

adapter: drafting (beam-grown trees, draft reuse, verification fusion, run-ahead); model: the backbone and
token-info injection; training: its trainer; cost: its cost model for the 8B-shape projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.trees.beam_shape import BeamOptions


@dataclass(frozen=True)
class LyannaOptions(BeamOptions):  # depth: K, backbone states per round, one per tree depth
    reuse: Literal["off", "logits", "states"] = "logits"
    reuse_weight: float = 0.5
    verify_fusion: Literal["on", "off"] = "on"  # off: the resampled root gets its own target forward first
    overlap: Literal["on", "off"] = "off"  # on: run the backbone ahead while verification runs (reuse=states)
    overlap_steps: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.overlap == "on" and self.reuse != "states":
            raise ValueError("overlap=on needs reuse=states: states run ahead are used only through state reuse")
        if self.overlap_steps < 1:
            raise ValueError(f"overlap_steps must be >= 1, got {self.overlap_steps}")
