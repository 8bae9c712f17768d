"""`polybasic`: Polybasic speculative decoding (Wang et al., ICML 2025), a target <- mid <- small chain.

adapter: the inner speculative loop (small drafts, mid verifies) and the block sent to the target; stage: one
drafting model with its KV cache and counters; graphed: the inner rounds as graphed blocks (``cuda_graphs=on``);
training: the mid LM's distillation from the target. The cost rule (the paper's T = sum_i F_i T_i and its
model-insertion condition, from measured latencies and acceptance lengths) is its view, ``methods.polybasic.view``;
the 8B-shape projection has no mid-model latency, so ``cost`` is None there.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError


@dataclass(frozen=True)
class PolybasicOptions:
    block: int = 8  # K: tokens of the mid model sent to the target each step
    gamma_inner: int = 4  # tokens the small model drafts per inner round, verified by the mid model

    def __post_init__(self) -> None:
        for name in ("block", "gamma_inner"):
            if getattr(self, name) < 1:
                raise DraftcountError(f"option '{name}' of method 'polybasic' must be >= 1, got {getattr(self, name)}")
