"""`dspark`: DSpark (DeepSeek-AI + PKU 2026, deepseek-ai/DeepSpec): DFlash's block backbone with a low-rank Markov
head and a confidence head that decides how much of the block is verified.

The block's slots are sampled in order, slot k's logits biased by ``W2 W1[x_{k-1}]`` (the token drafted before
it); the confidence head predicts each slot's survival, and the verify length is the prefix that maximises
expected emitted tokens per second under the target's measured latency per verified length (``latency_file``,
the workflow's ``tree/latency.json``; without one every length costs the same, and the whole block is verified
unless ``threshold`` cuts it).

model: the heads and the drafter (DeepSpec's layout); adapter: drafting, planning, committing; training: its
trainer and the confidence temperatures' fit (STS).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError


@dataclass(frozen=True)
class DSparkOptions:
    """block_size: 0 = the drafter's. threshold: cut the block before the first slot whose predicted prefix
    survival is below it (0: none). latency_file: the target's latency per verified tokens (``python -m harness``'s
    ``tree/latency.json``) for the planner (empty: a flat cost)."""

    block_size: int = 0
    threshold: float = 0.0
    latency_file: str = ""

    def __post_init__(self) -> None:
        if self.block_size < 0:
            raise DraftcountError(f"option 'block_size' of dspark must be 0 (the drafter's) or >= 1, "
                                  f"got {self.block_size}")
        if not 0.0 <= self.threshold < 1.0:
            raise DraftcountError(f"option 'threshold' of dspark must be in [0, 1), got {self.threshold}")
