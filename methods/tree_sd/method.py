"""`tree_sd`: its adapter and ``METHOD`` (the options are the package's: ``methods.tree_sd``)."""

from __future__ import annotations

import itertools
import json
import math
import operator
from pathlib import Path

from harness.backend.models import check_same_tokenizer
from harness.trees.sequoia import branching_shape
from methods.tree_sd import TreeSpeculativeDecodingOptions
from harness.engine.method_spec import BuildInputs, CostModel, Latencies, MethodSpec, option
from harness.trees.tree import depths_of
from harness.trees.tree_file import load_tree_file
from harness.engine.draft_lm import DraftLMAdapter
from harness.engine.drafting import CHOOSERS


def _build(options: TreeSpeculativeDecodingOptions, inputs: BuildInputs) -> DraftLMAdapter:
    assert inputs.draft is not None
    check_same_tokenizer(inputs.target, inputs.draft)
    if options.policy == "specinfer":
        shape = branching_shape(options.branching)
    else:
        shape = load_tree_file(options.tree_file)
    replacement = {"with": True, "without": False, "auto": options.policy == "specinfer"}[options.replacement]
    return DraftLMAdapter(inputs.draft, shape, replacement, CHOOSERS[options.drafts])


def tree_level_widths(options: dict) -> list[int] | None:
    """Nodes per depth of a tree_sd tree: SpecInfer's branching, or a Sequoia tree file (None if absent)."""
    if option(options, "policy", "specinfer") == "specinfer":
        branching = options.get("branching") or []
        if isinstance(branching, str):
            branching = branching.split(",")
        return list(itertools.accumulate((int(b) for b in branching), operator.mul)) or None
    tree_file = Path(str(options.get("tree_file") or ""))
    if not tree_file.is_file():
        return None
    parents = tuple(json.loads(tree_file.read_text())["parents"])
    depths = depths_of(parents)
    return [depths.count(depth) for depth in range(1, max(depths, default=0) + 1)] or [0]


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    """One draft-LM forward per tree level, as wide as the level: the root, then every level but the last
    (whose nodes have no children). nan for a Sequoia tree whose file is not at hand."""
    widths = tree_level_widths(options)
    if widths is None:
        return math.nan
    return latencies.draft_at(1) + sum(latencies.draft_at(float(width)) for width in widths[:-1])


METHOD = MethodSpec(options=TreeSpeculativeDecodingOptions, build=_build, cost=CostModel(drafting_seconds))
