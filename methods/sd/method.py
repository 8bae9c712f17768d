"""`sd`: its adapter and ``METHOD`` (the options are the package's: ``methods.sd``)."""

from __future__ import annotations


from harness.backend.models import check_same_tokenizer
from harness.trees.sequoia import branching_shape
from methods.sd import SpeculativeDecodingOptions
from harness.engine.method_spec import BuildInputs, CostModel, Latencies, MethodSpec, option
from harness.engine.draft_lm import DraftLMAdapter
from harness.engine.drafting import CHOOSERS


def _build(options: SpeculativeDecodingOptions, inputs: BuildInputs) -> DraftLMAdapter:
    assert inputs.draft is not None
    check_same_tokenizer(inputs.target, inputs.draft)
    gamma = options.as_run().gamma  # a length file's (`gamma: auto`) or the option's
    return DraftLMAdapter(inputs.draft, branching_shape([1] * gamma), replacement=True,
                          chooser=CHOOSERS[options.drafts])  # at T > 0: sampled (q carried) or top-k (q = 1)


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    """gamma draft-LM forwards of one token."""
    return int(option(options, "gamma", 4)) * latencies.draft_at(1)


METHOD = MethodSpec(options=SpeculativeDecodingOptions, build=_build, cost=CostModel(drafting_seconds))
