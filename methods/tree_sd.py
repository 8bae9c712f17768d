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

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from harness.errors import DraftcountError
from harness.models import check_same_tokenizer
from harness.tree_search import branching_shape
from methods import BuildInputs, MethodSpec, register
from methods.draft_lm import DraftModelTreeDrafter


@dataclass(frozen=True)
class TreeSpeculativeDecodingOptions:
    policy: Literal["specinfer", "sequoia"] = "specinfer"
    branching: tuple[int, ...] = (4, 2, 2, 1)
    tree_file: str = ""
    replacement: Literal["auto", "with", "without"] = "auto"

    def __post_init__(self) -> None:
        if self.policy == "sequoia" and not self.tree_file:
            raise DraftcountError("method 'tree_sd' with policy=sequoia needs option tree_file (from the tree search)")


def load_tree_file(path: str) -> tuple[int, ...]:
    """The shape a tree search wrote: JSON with a 'parents' list."""
    file = Path(path)
    if not file.is_file():
        raise DraftcountError(f"tree file {path} does not exist")
    try:
        parents = tuple(int(parent) for parent in json.loads(file.read_text())["parents"])
    except (ValueError, KeyError, TypeError) as error:
        raise DraftcountError(f"tree file {path} holds no 'parents' list ({error})") from None
    if not parents or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents) if i):
        raise DraftcountError(f"tree file {path}: 'parents' is not a tree with node 0 as root")
    return parents


def _build(options: TreeSpeculativeDecodingOptions, inputs: BuildInputs) -> DraftModelTreeDrafter:
    assert inputs.draft is not None
    check_same_tokenizer(inputs.target, inputs.draft)
    if options.policy == "specinfer":
        shape = branching_shape(options.branching)
    else:
        shape = load_tree_file(options.tree_file)
    replacement = {"with": True, "without": False, "auto": options.policy == "specinfer"}[options.replacement]
    return DraftModelTreeDrafter(inputs.draft, shape, replacement)


SPEC = register(
    MethodSpec(
        name="tree_sd",
        summary="token-tree speculative decoding with a draft LM (SpecInfer fixed branching or Sequoia DP tree)",
        options_type=TreeSpeculativeDecodingOptions,
        build=_build,
        needs_draft=True,
    )
)
