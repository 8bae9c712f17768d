"""harness/workflow_plan.py: what the workflow runs, from the default config (no Snakemake needed)."""

from pathlib import Path

import pytest
import yaml

from harness import workflow_jobs as jobs
from harness import workflow_datasets as datasets
from harness import workflow_plan as plan
from harness.errors import DraftcountError
from harness.trees.beam_shape import beam_methods

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config():
    return yaml.safe_load((ROOT / "workflow" / "config" / "default.yaml").read_text())


def test_traversal_variants_run_at_their_own_temperatures_only(config):
    assert plan.variant_temperatures(config, "eagle_tv") == ["1"]
    assert plan.variant_temperatures(config, "eagle") == ["0", "1"]
    arguments = jobs.run_arguments(config, "eagle_tv", "stdlib_code", "1", Path("w"), "t", drafter="d")
    assert arguments[arguments.index("--verifier") + 1] == "traversal"
    bad = {**config, "bench": {**config["bench"], "methods": {"x": {"method": "ar", "temperatures": [0.5]}}}}
    with pytest.raises(ValueError, match="0.5"):
        plan.variant_temperatures(bad, "x")


def test_auto_files_become_the_workflow_outputs_and_inputs(config):
    work = Path("w")
    stand = plan.variant_options(config, "stand", "1", work)
    assert stand == {"tree_file": "w/tree/stand-t1-n24.json"} and "tree_nodes" not in stand
    assert plan.variant_options(config, "tree_sd", "0", work)["tree_file"] == "w/tree/sequoia-t0-bauto.json"
    # budget: auto: the measured shape file replaces depth and budget, shared by the traversal twin
    eagle = plan.variant_options(config, "eagle", "1", work)
    assert eagle == {"top_k": 4, "shape_file": "w/tree/shape-eagle-eagle-t1.json"}
    assert plan.variant_options(config, "eagle_tv", "1", work)["shape_file"] == eagle["shape_file"]
    assert plan.built_inputs(config, "lyanna", "0", work) == {"shape_file": "w/tree/shape-lyanna-lyanna-t0.json"}
    assert "shape_file" not in plan.variant_options(config, "eagle_b12", "0", work)
    shape = jobs.tree_shape_arguments(config, "lyanna", "lyanna", "0", work, "t", "d", "p.jsonl", "lat.json")
    assert shape[shape.index("--opt") + 1] == "top_k=4" and "reuse=logits" in shape and "budget=auto" not in shape
    assert shape[shape.index("--max-budget") + 1] == "24" and shape[shape.index("--latency") + 1] == "lat.json"
    reader = plan.built_inputs(config, "reader", "0", work)
    assert reader == {"head": "w/drafters/eagle", "datastore": f"w/{plan.DATASTORE_FILE}"}
    hedge = plan.variant_options(config, "hedgespec_domains", "0", work)
    assert hedge["experts"] == ["eagle:drafter=w/drafters/eagle_net:name=eagle_net",
                                "eagle:drafter=w/drafters/eagle_gui:name=eagle_gui"]
    assert plan.built_inputs(config, "hedgespec_domains", "0", work)["expert_drafters"] == [
        "w/drafters/eagle_net", "w/drafters/eagle_gui"]


def test_every_main_tree_and_chain_variant_runs_a_calibrated_shape(config):
    """Issue 66: every beam drafter of the main comparison takes budget: auto, sd's gamma and pard's k the length
    rule chain_length measures (one file per method, drafter and temperature), and the calibration runs each at its
    largest shape: medusa no deeper than its heads."""
    work = Path("w")
    main = plan.main_variants(config)
    for variant in main:
        method = plan.variant_method(config, variant)
        if method in beam_methods():
            assert "shape_file" in plan.variant_options(config, variant, "0", work), variant
    assert plan.variant_options(config, "sd", "1", work) == {"length_file": "w/tree/length-sd-draft-t1.json"}
    assert plan.variant_options(config, "pard", "0", work) == {"length_file": "w/tree/length-pard-pard-t0.json"}
    assert plan.built_inputs(config, "pard", "0", work) == {"length_file": "w/tree/length-pard-pard-t0.json"}
    sd = jobs.chain_length_arguments(config, "sd", "draft", "0", work, "t", "w/models/draft", "p.jsonl", "lat.json")
    assert sd[sd.index("--draft") + 1] == "w/models/draft" and "--opt" not in sd  # gamma: auto is not passed on
    assert sd[sd.index("--max-length") + 1] == "8" and sd[sd.index("--repeats") + 1] == "3"
    pard = jobs.chain_length_arguments(config, "pard", "pard", "1", work, "t", "w/drafters/pard", "p.jsonl", "l.json")
    assert pard[pard.index("--drafter") + 1] == "w/drafters/pard" and pard[pard.index("--temperature") + 1] == "1"
    medusa = jobs.tree_shape_arguments(config, "medusa", "medusa", "0", work, "t", "d", "p.jsonl", "lat.json")
    assert medusa[medusa.index("--max-depth") + 1] == "5"  # its 5 heads
    mtp = jobs.tree_shape_arguments(config, "mtp", "mtp", "0", work, "t", "d", "p.jsonl", "lat.json")
    assert mtp[mtp.index("--max-depth") + 1] == "6" and "top_k=1" in mtp  # a chain, its length calibrated
    sampled = jobs.tree_shape_arguments(config, "eagle", "eagle", "1", work, "t", "d", "p.jsonl", "lat.json")
    assert sampled[sampled.index("--max-depth") + 1] == "3" and sampled[sampled.index("--max-budget") + 1] == "12"
    with pytest.raises(ValueError, match="no variant of sd with drafter other has gamma: auto"):
        jobs.chain_length_arguments(config, "sd", "other", "0", work, "t", "m", "p.jsonl", "lat.json")


def test_samples_and_own_datasets(config):
    arguments = jobs.run_arguments(config, "stand_samples", "stdlib_code", "1", Path("w"), "t")
    assert arguments[arguments.index("--samples") + 1] == "4"
    assert plan.variant_datasets(config, "hedgespec_domains") == ["stdlib_domains"]
    assert datasets.dataset_prompts(config, "stdlib_domains", Path("w")) == "w/prompts/stdlib_domains.jsonl"
    assert plan.variant_datasets(config, "stand_samples") == ["stdlib_code"]


def test_hub_ids_become_fetched_directories(config, tmp_path):
    assert plan.local_source("meta-llama/Llama-3.1-8B-Instruct", Path("w")) == "w/hub/meta-llama--Llama-3.1-8B-Instruct"
    local = tmp_path / "model"
    local.mkdir()
    assert plan.local_source(str(local), Path("w")) == str(local)  # an existing directory is itself
    assert plan.local_source("./missing/model", Path("w")) == "./missing/model"  # a path, never a hub request
    own = {**config, "models": {"target": "org/target", "draft": str(local)},
           "drafters": {"eagle3": {"path": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}, "lyanna": {}}}
    assert plan.hub_sources(own) == {"org--target": "org/target",
                                     "yuhuili--EAGLE3-LLaMA3.1-Instruct-8B": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
    assert plan.drafter_path(own, "eagle3", Path("w")) == "w/hub/yuhuili--EAGLE3-LLaMA3.1-Instruct-8B"


def test_bench_time_limits_and_the_feature_dump_size(tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(f'{{"question_id": {i}, "category": "{c}", "turns": {t}}}\n'
                                 for i, (c, t) in enumerate([("a", '["x", "y"]'), ("a", '["x", "y"]'), ("b", '["x"]'),
                                                             ("b", '["x"]'), ("c", '["x"]')])))
    config = {"bench": {"dataset_paths": {"q": str(questions)}, "limit": 3, "max_new_tokens": 100},
              "prompts": {"humaneval_limit": 7}}
    assert datasets.dataset_selection(config, "q", tmp_path) == (5, {"a": 2, "b": 1})  # the first 3
    config["bench"]["stratify"] = True
    assert datasets.dataset_selection(config, "q", tmp_path) == (4, {"a": 1, "b": 1, "c": 1})  # one of each
    selection = datasets.dataset_selection(config, "q", tmp_path)
    assert datasets.bench_runtime_minutes(config, "q", selection) == 60  # no seconds_per_token: the default
    config["bench"].update(seconds_per_token=0.5, repeats=2)
    # 10 min + 4 turns x 100 tokens x 0.5 s x 3 x 2 repeats = 10 + 20 minutes
    assert datasets.bench_runtime_minutes(config, "q", selection) == 30
    assert datasets.bench_runtime_minutes(config, "humaneval", None) == 10 + 35  # 7 prompts x 100 x 0.5 x 3 x 2
    config["bench"]["limits"] = {"q": 1, "humaneval": 2}  # a set's own limit over bench.limit (and humaneval's)
    assert datasets.dataset_selection(config, "q", tmp_path) == (2, {"a": 1}) and datasets.dataset_limit(config, "humaneval") == 2
    arguments = jobs.run_arguments({**config, "bench": {**config["bench"], "methods": {"ar": {}}}}, "ar", "q", "0",
                                   tmp_path, "t")
    assert arguments[arguments.index("--limit") + 1] == "1"
    features = {"sequences": 10, "seq_len": 8, "layers": ["last", 2], "dtype": "bfloat16"}
    assert plan.feature_dump_bytes(features, 16) == 10 * 8 * (16 * 2 * 2 + 4)


def test_every_variant_parses_at_plan_time_and_bad_values_stop_it(config):
    plan.check_variant_options(config, Path("w"))  # the shipped config: every variant's options parse
    for options, says in (({"top_k": 4, "budget": -3, "study": "s"}, "budget >= 1"),  # a study: its shape fixed
                          ({"top_kk": 3}, "unknown option 'top_kk'")):
        bad = {**config, "bench": {**config["bench"], "methods": {"eagle": options}}}
        with pytest.raises(ValueError, match=f"bench.methods.eagle: .*{says}"):
            plan.check_variant_options(bad, Path("w"))


def test_budget_auto_serves_every_beam_drafter_and_only_them(config):
    for method in ("eagle", "lyanna", "prism", "owl"):
        mine = {**config, "bench": {**config["bench"], "methods": {method: {"top_k": 4, "budget": "auto"}}}}
        options = plan.variant_options(mine, method, "0", Path("w"))
        assert options == {"top_k": 4, "shape_file": f"w/tree/shape-{method}-{method}-t0.json"}
    bad = {**config, "bench": {**config["bench"], "methods": {"pld": {"budget": "auto"}}}}
    with pytest.raises(ValueError, match="does not grow beam trees"):
        plan.variant_options(bad, "pld", "0", Path("w"))


def test_a_trained_drafter_method_without_a_drafters_entry_trains_with_its_defaults(config):
    bare = {**config, "drafters": {name: settings for name, settings in config["drafters"].items()
                                   if settings.get("method", name) != "owl"}}
    implied = plan.with_implied_drafters(bare)
    assert implied["drafters"]["owl"] == {"method": "owl"}
    arguments = jobs.train_arguments(implied, "owl", "t", "d", "h", Path("w"))
    assert arguments[arguments.index("--steps") + 1] == "1000" and "--opt" not in arguments
    assert plan.with_implied_drafters(config) is config  # every method has its entry: nothing added


def test_a_drafter_entry_with_a_token_budget_trains_to_it(config):
    budgeted = {**config, "drafters": {**config["drafters"], "owl": {"method": "owl", "budget_tokens": 122880}}}
    arguments = jobs.train_arguments(budgeted, "owl", "t", "d", "h", Path("w"))
    assert arguments[arguments.index("--budget-tokens") + 1] == "122880" and "--steps" not in arguments
    both = {**config, "drafters": {"owl": {"budget_tokens": 100, "steps": 3}}}
    with pytest.raises(DraftcountError, match="drafter owl: give steps or budget_tokens, not both"):
        jobs.train_arguments(both, "owl", "t", "d", "h", Path("w"))


def test_sampled_runs_take_the_configured_top_k_and_top_p(config):
    warped = {**config, "bench": {**config["bench"], "top_k": 20, "top_p": 0.9}}
    sampled = jobs.run_arguments(warped, "sd", "stdlib_code", "1", Path("w"), "t", draft="d")
    assert sampled[sampled.index("--top-k") + 1] == "20" and sampled[sampled.index("--top-p") + 1] == "0.9"
    assert "--top-k" not in jobs.run_arguments(warped, "sd", "stdlib_code", "0", Path("w"), "t", draft="d")
    assert "--top-k" not in jobs.run_arguments(config, "sd", "stdlib_code", "1", Path("w"), "t", draft="d")


def test_the_load_study_decodes_the_batched_main_variants_or_the_named_ones(config):
    assert sorted(plan.load_variants(config)) == [  # the batched main variants, and eagle's sizes marked load: true
        "dflash", "eagle", "eagle_b12", "eagle_b48", "lyanna", "sd", "tree_sd"]
    assert "load" not in plan.variant_options(config, "eagle_b12", "0", Path("w"))  # a workflow key, not an option
    marked = {**config, "bench": {**config["bench"], "methods": {**config["bench"]["methods"],
                                                                 "pld": {"load": True}}}}
    with pytest.raises(ValueError, match="load: true: pld's method 'pld' decodes one request at a time"):
        plan.load_variants(marked)
    for variants, message in ((["eagel"], "'eagel' is not a variant"),
                              (["pld"], "pld's method 'pld' decodes one request at a time")):
        with pytest.raises(ValueError, match=message):
            plan.load_variants({**config, "bench": {**config["bench"], "load_variants": variants}})


@pytest.mark.parametrize("name", ["default", "smollm2", "llama3-8b", "qwen3-8b", "smoke"])
def test_every_configs_tree_shape_fits_its_latency_table(name):
    """`budget: auto` calibrates shapes up to tree_shape.max_budget drafts and the root: the latency table
    (tree_search.latency_sizes) must measure a tree that large (the SmolLM2 run once stopped on 32 against 33)."""
    root = Path(__file__).resolve().parents[1] / "workflow" / "config"
    config = yaml.safe_load((root / f"{name}.yaml").read_text())
    if name == "smoke":  # merged over the default config
        base = yaml.safe_load((root / "default.yaml").read_text())
        config = {key: {**base.get(key, {}), **config.get(key, {})} for key in ("tree_search", "tree_shape")}
    if "tree_shape" not in config:
        pytest.skip(f"{name} calibrates no beam shape")
    assert config["tree_shape"]["max_budget"] + 1 <= max(config["tree_search"]["latency_sizes"])
