"""harness/trees/calibration_protocol.py: every target's main variants run calibrated lengths and shapes (issue 79)."""

from pathlib import Path

import pytest
import yaml

from harness import workflow_jobs as jobs
from harness import workflow_plan as plan
from harness.errors import DraftcountError
from harness.trees.beam_shape import beam_methods
from harness.trees.calibration_protocol import calibrated_settings, protocol_variants
from harness.trees.chain_shape import chain_field, chain_methods

CONFIGS = Path(__file__).resolve().parents[2] / "workflow" / "config"


def shipped(name: str) -> dict:
    return yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())


@pytest.mark.parametrize("name", ["default", "smollm2"])
def test_every_targets_main_variants_run_a_measured_length_or_shape(name):
    """Both targets: every main variant of a beam drafter runs a shape file, of a chain drafter a length file, at
    every temperature; neither config opts out."""
    config = shipped(name)
    assert "fixed_shapes" not in config["bench"]
    for variant in plan.main_variants(config):
        method = plan.variant_method(config, variant)
        for temperature in plan.temperature_names(config):
            options = plan.variant_options(config, variant, temperature, Path("w"))
            if method in beam_methods():
                assert "shape_file" in options and not {"depth", "budget"} & set(options), (name, variant)
            if method in chain_methods():
                assert "length_file" in options and chain_field(method) not in options, (name, variant)
    assert {plan.variant_method(config, variant) for variant in plan.main_variants(config)} >= {
        "sd", "pard", "dflash", "prism", "owl", "medusa", "mtp", "dream", "eagle", "lyanna"}


def test_a_left_out_shape_is_calibrated_and_a_fixed_one_stops_the_plan():
    assert calibrated_settings("dflash", "dflash", {}) == {"verify_length": "auto"}
    assert calibrated_settings("owl", "owl", {"top_k": 4}) == {"top_k": 4, "budget": "auto"}
    assert calibrated_settings("pld", "pld", {"max_draft": 8}) == {"max_draft": 8}
    for method, settings, says in (("sd", {"gamma": 4}, "gamma: 4"), ("owl", {"depth": 5, "budget": 24}, "depth: 5"),
                                   ("eagle", {"depth": 3, "budget": "auto"}, "depth: 3"),
                                   ("tree_sd", {"policy": "specinfer", "branching": [4, 2]}, "branching"),
                                   ("tree_sd", {"tree_budget": 16}, "tree_budget: 16")):
        with pytest.raises(ValueError, match=f"bench.methods.x: {says}.* fixes a main variant's shape"):
            calibrated_settings("x", method, settings)


def test_a_study_variant_keeps_its_fixed_shape_and_a_config_may_say_why_it_fixes_all():
    variants = {"owl_b24": {"method": "owl", "study": "families", "depth": 5, "budget": 24},
                "lyanna_b12": {"method": "lyanna", "ablation": True, "depth": 5, "budget": 12}}
    assert protocol_variants(variants, None) == variants
    assert protocol_variants({"sd": {"gamma": 4}}, "an engine check") == {"sd": {"gamma": 4}}
    config = shipped("smollm2")
    fixed = {**config, "bench": {**config["bench"], "methods": {**config["bench"]["methods"], "prism": {
        "top_k": 4, "depth": 5, "budget": 24}}}}
    with pytest.raises(ValueError, match="bench.methods.prism: depth: 5, budget: 24 fixes"):
        plan.check_variant_options(fixed, Path("w"))
    said = {**fixed, "bench": {**fixed["bench"], "fixed_shapes": "a published shape"}}
    assert plan.variant_options(said, "prism", "0", Path("w")) == {"top_k": 4, "depth": 5, "budget": 24}


def test_an_implied_variant_is_calibrated_too():
    """A catalog method the config leaves out runs its default options, its length or shape measured."""
    config = shipped("default")
    bare = {**config, "bench": {**config["bench"], "methods": {"ar": {}}}}
    assert plan.variant_options(bare, "pard", "0", Path("w")) == {"length_file": "w/tree/length-pard-pard-t0.json"}
    assert plan.variant_options(bare, "dream", "1", Path("w")) == {"shape_file": "w/tree/shape-dream-dream-t1.json"}


def test_the_draft_lm_trains_on_the_drafters_largest_budget():
    """smollm2.yaml: `budget: drafters`, so raising the heads' budget raises the draft LM's with it."""
    config = shipped("smollm2")
    assert jobs.draft_lm_settings(config)["train"]["steps"] == 480  # 491,520 positions (issue 80's 4x) over 4 x 256
    raised = {**config, "drafters": {**config["drafters"], "eagle": {**config["drafters"]["eagle"],
                                                                     "steps": 960}}}
    assert jobs.draft_lm_settings(raised)["train"]["steps"] == 960  # 983,040 positions
    budgeted = {**config, "drafters": {**config["drafters"], "eagle": {"data": "features", "budget_tokens": 983040}}}
    assert jobs.draft_lm_settings(budgeted)["train"]["steps"] == 960
    assert jobs.draft_lm_settings(shipped("default")) == shipped("default")["draft"]  # its own steps
    both = {**config, "draft": {**config["draft"], "train": {**config["draft"]["train"], "steps": 3}}}
    with pytest.raises(DraftcountError, match="give train.steps or budget: drafters, not both"):
        jobs.draft_lm_settings(both)
