"""`pard`: PARD (AMD, arXiv 2504.18583, ICLR 2026): a small draft LM adapted to draft ``k`` tokens in ONE forward.

The drafter is a causal LM with the target's vocabulary plus one mask token (its config's ``pard_token``, where
vLLM reads it for ``parallel_drafting``). Each step it reads the tokens it has not seen (the last accepted drafts
and the bonus token) followed by ``k - 1`` mask tokens: the output at the last real token is the distribution of
draft 1, the output at mask j that of draft j + 1, each conditioned on the accepted text and j masks, not on the
drafts before it. Drafts are drawn from those distributions (argmax when greedy) and verified as a chain by the
shared verifier, which only needs each draft to be drawn from the distribution it carries: lossless. The masks'
keys are dropped from the drafter's cache after the forward, so its cache holds accepted text only.

Training (``methods.pard.training``) adapts an autoregressive draft LM (``init``: the workflow passes the zoo's
draft LM) on the token stream, target-independent as PARD's is: every window keeps its next-token loss and adds
``anchors`` blocks of ``k - 1`` masks, mask j after position a learning x_{a+1+j}, in one forward with a mask that
lets each block see its own prefix only.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError
from harness.trees.chain_shape import ChainOptions


@dataclass(frozen=True)
class PardOptions(ChainOptions):
    CHAIN_LENGTH = "k"  # `k: auto`: the length measured best on the machine (rule chain_length)
    k: int = 4  # drafts per step, all from one drafter forward (sd's gamma, at one forward instead of gamma)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise DraftcountError(f"option 'k' of method 'pard' must be >= 1, got {self.k}")
