"""`dflash`: DFlash block drafting (Chen, Liang, Liu 2026, arXiv 2602.06036; z-lab/dflash).

A few decoder layers draft a whole block in one non-causal forward: the block is [last accepted token,
MASK x (B - 1)] through the target's embedding, every layer's keys and values are the block's own after those of
the projected target hidden states of a few target layers (KV injection), and the target's LM head reads the mask
positions. The block is verified as a chain, or as a tree from each position's top-k (``top_k`` > 1).

model: the network (z-lab's checkpoint layout); checkpoint: reading and writing drafters; adapter: drafting and
committing; training: its trainer (masked blocks at random anchors); cost: its cost model for the projection.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError
from harness.trees.chain_shape import ChainOptions


@dataclass(frozen=True)
class DFlashOptions(ChainOptions):
    """How a trained DFlash drafter drafts: the block (0: the drafter's own block size), and a chain (top_k 1) or a
    tree of each position's top-k tokens, the ``budget`` best nodes by cumulative log-probability. A chain verifies
    its first ``verify_length`` drafts (0: every draft of the block; more than the block drafts verifies them all):
    the block is drafted whole in one forward either way, so a shorter chain costs the target less and the drafter
    the same; `verify_length: auto` is the length measured best on the machine (rule chain_length, as sd's gamma)."""

    CHAIN_LENGTH = "verify_length"
    block_size: int = 0
    top_k: int = 1
    budget: int = 0  # tree nodes verified with top_k > 1 (0: (block_size - 1) * top_k)
    verify_length: int = 0

    def __post_init__(self) -> None:
        if self.block_size == 1 or self.block_size < 0:
            raise DraftcountError(f"option 'block_size' of dflash must be 0 (the drafter's) or >= 2, "
                                  f"got {self.block_size}")
        if self.top_k < 1 or self.budget < 0:
            raise DraftcountError(f"options 'top_k' (>= 1) and 'budget' (>= 0) of dflash got {self.top_k} and "
                                  f"{self.budget}")
        if self.top_k == 1 and self.budget:
            raise DraftcountError("option 'budget' of dflash needs top_k > 1 (a chain verifies the whole block)")
        if self.verify_length < 0 or (self.top_k > 1 and (self.verify_length or self.length_file)):
            raise DraftcountError(f"option 'verify_length' of dflash cuts a chain (top_k 1) and must be >= 0, got "
                                  f"{self.verify_length} with top_k {self.top_k}")
