"""`pard`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import CostModel, Latencies, MethodSpec, option
from methods.pard import PardOptions
from methods.pard.adapter import build
from methods.pard.training import train_pard


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    """One draft-LM forward of k tokens (the unseen accepted tokens, about one, and k - 1 masks)."""
    return latencies.draft_at(int(option(options, "k", 4)))


METHOD = MethodSpec(options=PardOptions, build=build, train=train_pard, cost=CostModel(drafting_seconds))
