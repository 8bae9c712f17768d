"""`sd`: standard speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

A small draft LM with the target's tokenizer drafts a chain of gamma tokens
(argmax when greedy, sampled from its warped distribution otherwise); the
shared verifier accepts a prefix by rejection sampling or greedy match. It is
the width-one case of the draft-LM tree drafter, so the draft KV cache is kept
in sync by the same code as `tree_sd`: after each step it holds the accepted
tokens it has seen, and what it has not seen yet (the last accepted draft, the
bonus token) is fed at the start of the next step.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError
from harness.trees.chain_shape import ChainOptions


@dataclass(frozen=True)
class SpeculativeDecodingOptions(ChainOptions):
    CHAIN_LENGTH = "gamma"  # `gamma: auto`: the length measured best on the machine (rule chain_length)
    gamma: int = 4

    def __post_init__(self) -> None:
        if self.gamma < 1:
            raise DraftcountError(f"option 'gamma' of method 'sd' must be >= 1, got {self.gamma}")
