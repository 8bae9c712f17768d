"""`stand`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import BuildInputs, MethodSpec, NO_DRAFTING
from harness.trees.sequoia import branching_shape
from harness.trees.tree_file import load_tree_file
from methods.stand import StandOptions
from methods.stand.adapter import StandAdapter


def build(options: StandOptions, inputs: BuildInputs) -> StandAdapter:
    shape = load_tree_file(options.tree_file) if options.tree_file else branching_shape(options.branching)
    return StandAdapter(options, shape)


METHOD = MethodSpec(options=StandOptions, build=build, cost=NO_DRAFTING)
