"""harness/engine/draft_lm*.py: the expansion plan of a tree shape, and the draft LM's whole draft as one graphed
block (sd, tree_sd) drafting what the eager draft does, greedy and at T = 1, with and without replacement."""

import json

import pytest
import torch

from harness import SamplingConfig, generate
from harness.engine.draft_lm_plan import expansion_plan
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.trees.sequoia import optimal_tree
from tests.helpers import ENGINE_SWITCHES, assert_drafts_as_eager, engine_runtime, markov_batches


def test_the_plan_draws_every_level_and_feeds_only_nodes_with_children():
    # root -> a, b; a -> c, d; b -> e; c -> f   (shape nodes 0..6)
    plan = expansion_plan((-1, 0, 0, 1, 1, 2, 3))
    assert plan.parents == (-1, 0, 0, 1, 1, 2, 3)
    assert [level.depth for level in plan.levels] == [1, 2, 3]
    assert [level.choices for level in plan.levels] == [((0, 2),), ((1, 2), (2, 1)), ((3, 1),)]
    assert [level.fed for level in plan.levels] == [(1, 2), (3,), ()]
    assert [level.cached for level in plan.levels] == [(), (1, 2), (1, 2, 3)]
    assert plan.fed == (1, 2, 3)
    chain = expansion_plan((-1, 0, 1, 2))
    assert [level.fed for level in chain.levels] == [(1,), (2,), ()] and chain.fed == (1, 2)


@pytest.fixture(scope="module")
def sequoia_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tree") / "sequoia.json"
    path.write_text(json.dumps({"parents": list(optimal_tree([0.5, 0.2, 0.1], budget=8, max_depth=3).parents)}))
    return str(path)


@pytest.mark.parametrize("method, options", [("sd", {"gamma": "3"}), ("tree_sd", {"branching": "2,2,1"}),
                                             ("tree_sd", {"policy": "sequoia"})])
def test_the_graphed_draft_drafts_what_the_eager_draft_does(trained_pair, sequoia_file, method, options):
    """Under cuda_graphs=on (run eagerly on the CPU) the catch-up and every level as one block per catch-up length
    (after a prompt's first catch-up, which runs on its own: the levels as one block) emit the same tokens and
    accept the same drafts at every step as the eager draft on a static cache, and book the same drafter forwards,
    FLOPs and useful work: greedy (top-k children inside the block) and at T = 1 (children sampled inside it, with
    replacement for sd and SpecInfer's trees, without for Sequoia's)."""
    target, draft = trained_pair
    if options.get("policy") == "sequoia":
        options = {**options, "tree_file": sequoia_file}
    prompts = [row[None] for row in next(markov_batches(48, 2, 10, seed=5))]
    for sampling in (SamplingConfig(), SamplingConfig(1.0)):
        runs = {}
        for switch in ENGINE_SWITCHES:
            adapter, _ = build_adapter(method, options, BuildInputs(target, draft, None))
            runtime = engine_runtime(target, switch)
            runs[switch] = [generate(target, adapter, prompt, 16, sampling, runtime=runtime,
                                     generator=torch.Generator().manual_seed(seed))
                            for seed, prompt in enumerate(prompts)]
        graphs = runtime.graphs_of(adapter)
        kinds = [key[1] for key in graphs.graphs if key[0] == "block"]  # (kind, [catch-up length], shape, ...)
        assert len({kind[1] for kind in kinds if kind[0] == "draft_lm"}) > 1  # blocks of several catch-up lengths
        assert any(kind[0] == "draft_lm_levels" for kind in kinds)  # the levels after a prompt's first catch-up
        assert graphs.eager_calls == len(prompts)  # only each prompt's first catch-up ran on its own
        assert_drafts_as_eager(runs["static"], runs["graph_buffers"])
        assert sum(sum(result.counters.step_accepted) for result in runs["graph_buffers"]) > 0
