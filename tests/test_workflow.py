"""The Snakemake workflow: dry runs, config validation, the smoke pipeline end to end, kill and resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
ZOO_RULES = {"corpus", "tokenizer", "tokenize", "train_target", "train_draft", "dump_features", "code_prompts"}
TREE_RULES = {"measure_acceptance", "measure_latency", "sequoia_tree"}


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


def overrides(tmp_path):
    return ["--config", f"work_dir={tmp_path / 'work'}", f"results_dir={tmp_path / 'results'}"]


def test_dry_run_lists_every_rule(tmp_path):
    result = snakemake("-n", *overrides(tmp_path))
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert ZOO_RULES | TREE_RULES | {"bench", "summary", "all"} <= set(counts), counts
    # {ar, sd, tree_sd, tree_sd_sequoia, tree_sd_sequoia_b32, eagle, lyanna} x 2 datasets x {0, 1}
    # + 7 lyanna ablations x 1 dataset x {0, 1}
    assert counts["bench"] == 7 * 4 + 7 * 2
    assert counts["train_drafter"] == 4  # eagle, lyanna, lyanna_feature, lyanna_vocab
    assert counts["sequoia_tree"] == 4  # per temperature: the latency-chosen budget and the fixed one


def test_one_target_runs_only_what_it_needs(tmp_path):
    result = snakemake("-n", "bench_ar", *overrides(tmp_path))
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert "train_draft" not in counts and "dump_features" not in counts and counts["bench"] == 4
    tree = job_counts(snakemake("-n", "bench_tree_sd", *overrides(tmp_path)).stdout)
    assert tree["bench"] == 12 and TREE_RULES <= set(tree) and "dump_features" not in tree
    eagle = job_counts(snakemake("-n", "bench_eagle", *overrides(tmp_path)).stdout)
    assert eagle["bench"] == 4 and eagle["train_drafter"] == 1 and "train_draft" not in eagle
    assert not TREE_RULES & set(eagle)
    ablation = job_counts(snakemake("-n", "ablate_lyanna", *overrides(tmp_path)).stdout)
    assert ablation["bench"] == 14 and ablation["train_drafter"] == 3 and "train_draft" not in ablation


@pytest.mark.parametrize("bad,key", [
    ("tokenzier:\n  vocab_size: 100\n", "tokenzier"),
    ("target:\n  train:\n    stpes: 5\n", "stpes"),
    ("bench:\n  temperatures: [0.0]\n  methods: {ar: {}}\n  datasets: [humaneval]\n  max_new_token: 3\n", "max_new_token"),
])
def test_unknown_config_key_fails_validation(tmp_path, bad, key):
    config = tmp_path / "bad.yaml"
    config.write_text(bad)
    result = snakemake("-n", "--configfile", "workflow/config/default.yaml", str(config), *overrides(tmp_path))
    assert result.returncode != 0
    assert key in result.stdout + result.stderr


@pytest.mark.slow
def test_smoke_pipeline_end_to_end(tmp_path):
    started = time.perf_counter()
    result = snakemake("--cores", "all", "--profile", "workflow/profiles/smoke", *overrides(tmp_path), timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(f"smoke pipeline: {time.perf_counter() - started:.0f}s")
    work, results = tmp_path / "work", tmp_path / "results"
    for model in ("target", "draft"):
        provenance = json.loads((work / "models" / model / "draftcount.json").read_text())
        assert provenance["corpus"]["splits"]["train"]["sha256"] and provenance["metrics"]["training"]["steps"] > 0
    code = ("from transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f"for d in ['{work / 'models' / 'target'}', '{work / 'models' / 'draft'}']:\n"
            "    AutoModelForCausalLM.from_pretrained(d); AutoTokenizer.from_pretrained(d)\n")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, fresh.stderr
    summary = (results / "tables" / "summary.csv").read_text()
    assert all(variant in summary for variant in ("ar", "sd", "tree_sd", "tree_sd_sequoia", "tree_sd_sequoia_b32",
                                                  "eagle", "lyanna", "lyanna_reuse_off", "lyanna_vocab"))
    assert len(list((results / "raw").rglob("*.jsonl"))) == 14  # every variant on stdlib_code at temperature 0
    for drafter in ("eagle", "lyanna", "lyanna_feature", "lyanna_vocab"):
        assert json.loads((work / "metrics" / f"drafter-{drafter}.json").read_text())["train"]["steps"] > 0
    tree = json.loads((work / "tree" / "sequoia-t0-b32.json").read_text())
    assert tree["parents"][0] == -1 and tree["depth"] <= 4 and tree["budget"] <= 32
    assert not list(tmp_path.rglob("*.partial"))
    again = snakemake("-n", "--profile", "workflow/profiles/smoke", *overrides(tmp_path))
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_killed_training_resumes_from_its_checkpoint(tmp_path):
    config = tmp_path / "long.yaml"
    config.write_text("target:\n  train: {steps: 100000, time_budget_s: 25, checkpoint_every_s: 2}\n")
    args = ["--cores", "2", "--profile", "workflow/profiles/smoke", "--configfile", "workflow/config/default.yaml",
            "workflow/config/smoke.yaml", str(config), *overrides(tmp_path), "--until", "train_target"]
    checkpoint = tmp_path / "work" / "checkpoints" / "target.pt"
    process = subprocess.Popen([*SNAKEMAKE, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not checkpoint.exists():
        time.sleep(1)
    assert checkpoint.exists(), "no checkpoint was written"
    time.sleep(3)
    os.killpg(process.pid, signal.SIGKILL)  # as hard a kill as there is: no clean-up runs
    process.wait(timeout=60)
    assert not (tmp_path / "work" / "models" / "target" / "config.json").exists()
    assert snakemake(*args, "--unlock").returncode == 0
    result = snakemake(*args, "--rerun-incomplete", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "resuming train target from step" in result.stdout + result.stderr
    metrics = json.loads((tmp_path / "work" / "metrics" / "target.json").read_text())
    assert metrics["training"]["resumed_from_step"] > 0
