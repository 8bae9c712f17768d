"""`stand`: STAND, stochastic adaptive n-gram drafting (Song et al. 2025, arXiv 2506.04708).

Model-free: no drafter model, no drafter FLOPs. See ``adapter.py`` for the drafting and ``tree_search.py`` for the
data-driven static tree (`python -m harness stand-tree`, the workflow's rule ``stand_tree``).
"""

from harness.engine.method_spec import BuildInputs, MethodSpec
from harness.measure.costs import NO_DRAFTING
from harness.trees.sequoia import branching_shape
from harness.trees.tree_file import load_tree_file
from methods.stand.adapter import StandAdapter, StandOptions


def build(options: StandOptions, inputs: BuildInputs) -> StandAdapter:
    shape = load_tree_file(options.tree_file) if options.tree_file else branching_shape(options.branching)
    return StandAdapter(options, shape)


METHOD = MethodSpec(options=StandOptions, build=build, cost=NO_DRAFTING)
