"""`tree_sd`: token-tree speculative decoding with a draft LM (SpecInfer and Sequoia trees).

policy=specinfer: a fixed expansion pattern, ``branching[d]`` children for every
node at depth d; children sampled with replacement by default (SpecInfer's
multi-step speculative sampling), top-k when greedy.
policy=sequoia: a static shape chosen by dynamic programming from this
draft/target pair's measured per-rank acceptance and a latency-chosen node
budget (written by the workflow's tree search to ``tree_file``); children
sampled without replacement by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.errors import DraftcountError


@dataclass(frozen=True)
class TreeSpeculativeDecodingOptions:
    policy: Literal["specinfer", "sequoia"] = "specinfer"
    branching: tuple[int, ...] = (4, 2, 2, 1)
    tree_file: str = ""
    replacement: Literal["auto", "with", "without"] = "auto"
    drafts: Literal["sampled", "topk"] = "sampled"  # at T > 0: sampled children carrying q, or top-k with q = 1

    def __post_init__(self) -> None:
        if self.policy == "sequoia" and not self.tree_file:
            raise DraftcountError("method 'tree_sd' with policy=sequoia needs option tree_file (from the tree search)")
