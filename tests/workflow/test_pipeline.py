"""The smoke pipeline run for real: end to end, hard-killed and resumed (slow: it runs the workflow's jobs). A run
killed in training resumes from its checkpoint: tests/workflow/test_resume.py."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from tests.workflow.test_workflow import ROOT, SMOKE_MAIN, SMOKE_VARIANTS, SNAKEMAKE, overrides, snakemake


def report_cell(text: str, variant: str, dataset: str, temperature: str, column: str) -> str:
    header = None
    for line in text.splitlines():
        if line.startswith("| variant |"):
            header = [cell.strip() for cell in line.strip("|").split("|")]
        elif header and line.startswith(f"| {variant} | {dataset} | {temperature} |"):
            return dict(zip(header, (cell.strip() for cell in line.strip("|").split("|"))))[column]
    raise AssertionError(f"no row {variant}/{dataset}/{temperature}")


@pytest.mark.slow
def test_smoke_pipeline_end_to_end_killed_and_resumed(tmp_path):
    """The whole pipeline, hard-killed once its benchmarks have begun, then resumed: finished jobs are kept,
    no half-written file is used, and the tables, figures, report and Spec-Bench export come out."""
    started = time.perf_counter()
    args = ["--cores", "2", "--profile", "workflow/profiles/smoke", *overrides(tmp_path)]
    targets = ["all", "studies"]  # the main comparison and the studies (the smoke variants' ablations)
    work, results = tmp_path / "work", tmp_path / "results"
    log = tmp_path / "first-run.log"
    with log.open("w") as handle:
        process = subprocess.Popen([*SNAKEMAKE, *targets, *args], cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        deadline = time.time() + 480
        # kill once Snakemake has recorded two finished benchmarks (its log says so after it has)
        while time.time() < deadline and log.read_text().count("(Rule: bench)") < 2 and process.poll() is None:
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    present = {path: path.stat().st_mtime_ns for path in (results / "raw").rglob("*.jsonl")}
    assert 2 <= len(present) < len(SMOKE_VARIANTS), "the kill came before the benchmarks or after the last one"
    for path in present:  # whatever exists is complete: every line a whole record
        assert all(json.loads(line)["schema_version"] for line in path.read_text().splitlines())
    assert snakemake(*args, "--unlock").returncode == 0
    # a job killed after its output appeared but before Snakemake recorded it is rerun; the rest is kept
    plan = snakemake(*targets, *args, "-n", "--rerun-incomplete").stdout
    scheduled = {Path(line.split("output:", 1)[1].strip()) for line in plan.splitlines() if "output:" in line}
    completed = {path: mtime for path, mtime in present.items() if path not in scheduled}
    assert completed, plan[-3000:]
    result = snakemake(*targets, *args, "--rerun-incomplete", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(f"smoke pipeline, killed and resumed: {time.perf_counter() - started:.0f}s; "
          f"{len(completed)} of {len(present)} finished benchmarks kept")
    assert {path: path.stat().st_mtime_ns for path in completed} == completed  # not redone
    for model in ("target", "draft"):
        provenance = json.loads((work / "models" / model / "draftcount.json").read_text())
        assert provenance["corpus"]["splits"]["train"]["sha256"] and provenance["metrics"]["training"]["steps"] > 0
    code = ("from transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f"for d in ['{work / 'models' / 'target'}', '{work / 'models' / 'draft'}']:\n"
            "    AutoModelForCausalLM.from_pretrained(d); AutoTokenizer.from_pretrained(d)\n")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, fresh.stderr
    summary = pd.read_csv(results / "tables" / "summary.csv")
    assert sorted(set(summary.variant)) == sorted(SMOKE_MAIN)  # the main comparison: one variant per method
    assert sorted(set(pd.read_csv(results / "studies" / "tables" / "summary.csv").variant)) == sorted(SMOKE_VARIANTS)
    # stdlib_code at temperature 0, eagle also on the mixed-domain set (the per-category view), and the learning
    # curves' two chains (eagle_lc05_chain, eagle_chain) and eagle_lc05 at its own shape (eagle's own run is rung 1):
    # read by their table only, not by the studies' summary
    assert len(list((results / "raw").rglob("*.jsonl"))) == len(SMOKE_VARIANTS) + 1 + 2 + 1
    categories = pd.read_csv(results / "tables" / "categories.csv")
    assert set(categories.variant) == {"eagle"} and set(categories.category) == {"net", "gui", "overall"}
    assert (results / "figures" / "categories.pdf").stat().st_size > 1000
    for drafter in ("eagle", "lyanna", "lyanna_feature"):
        assert json.loads((work / "metrics" / f"drafter-{drafter}.json").read_text())["train"]["steps"] > 0
    tree = json.loads((work / "tree" / "sequoia-t0-b16.json").read_text())
    assert tree["parents"][0] == -1 and tree["depth"] <= 4 and tree["budget"] <= 16
    for folder, name in [*((results / "figures", name) for name in ("speedup", "tau", "waste", "depth", "efficiency")),
                         *((results / "studies" / "figures", name) for name in ("budget", "ablation"))]:
        assert (folder / f"{name}.pdf").stat().st_size > 1000
        assert matplotlib.image.imread(folder / f"{name}.png").shape[0] > 200
    # the drafter studies at smoke size: eagle at half its budget, as a chain and at its own calibrated shape, and at
    # other learning rates
    curves = pd.read_csv(results / "studies" / "tables" / "learning_curves.csv")
    assert list(curves.drafter) == ["eagle_lc05", "eagle"] and curves.tokens.iloc[0] * 2 == curves.tokens.iloc[1]
    assert (curves.chain_tau_t0 >= 1).all() and curves.chain_speedup_t0.notna().all()  # each rung's chain of 2
    assert curves.calibrated_speedup_t0.notna().all()  # and at its own calibrated shape
    assert curves.calibrated_shape_t0.str.startswith("depth ").all() and (curves.calibrated_tau_t0 >= 1).all()
    assert (work / "tree" / "shape-eagle-eagle_lc05-t0.json").is_file()  # the rung's own calibration
    assert (results / "studies" / "figures" / "learning_curves.png").stat().st_size > 1000
    assert int(pd.read_csv(results / "studies" / "tables" / "lr.csv").chosen.sum()) == 1
    studies = (results / "studies" / "report.md").read_text()
    assert "### Ablations and budget sweeps" in studies and "![budget]" in studies
    report = (results / "report.md").read_text()
    assert "### Per category" in report and "**stdlib_domains, T = 0**" in report
    assert report.index("## Regime") < report.index("## Environment and runs")  # the regime card comes first
    assert "![ablation]" not in report and "![budget]" not in report  # no data in the main comparison: not embedded
    assert not (results / "figures" / "ablation.pdf").exists() and not (results / "figures" / "budget.pdf").exists()
    eagle = summary[summary.dataset == "stdlib_code"].set_index("variant").loc["eagle"]
    assert report_cell(report, "eagle", "stdlib_code", "0", "tau") == f"{eagle.tau:.2f}"
    assert report_cell(report, "eagle", "stdlib_code", "0", "speedup") == f"{eagle.speedup_paired_mean:.2f}"
    counters = [json.loads(line)["counters"] for line in (results / "raw" / "eagle" / "stdlib_code-t0.jsonl").open()
                if json.loads(line)["role"] == "method"]
    tau = (sum(min(sum(a + 1 for a in c["step_accepted"]), c["new_tokens"]) for c in counters)
           / sum(len(c["step_accepted"]) for c in counters))  # EAGLE/Spec-Bench: accepted + 1 per step
    assert report_cell(report, "eagle", "stdlib_code", "0", "tau") == f"{tau:.2f}"  # recomputed from raw records
    answers = results / "specbench" / "stdlib_code-t0" / "model_answer"
    assert {"eagle.jsonl", "eagle.ar.jsonl", "ar.jsonl"} <= {path.name for path in answers.iterdir()}
    assert not list(tmp_path.rglob("*.partial"))
    again = snakemake("-n", "--profile", "workflow/profiles/smoke", *overrides(tmp_path))
    assert "Nothing to be done" in again.stdout + again.stderr
    # the checks on the same models, on CPU: every rule of workflow/rules/checks.smk runs
    started = time.perf_counter()
    checks = snakemake("checks", *args, timeout=900)
    assert checks.returncode == 0, checks.stdout[-3000:] + checks.stderr[-3000:]
    print(f"smoke checks: {time.perf_counter() - started:.0f}s")
    done = results / "checks"
    lossless = pd.read_csv(done / "lossless.csv")
    assert len(lossless) and int(lossless.diverged.sum()) == 0  # float32: every method equals ar
    assert len(pd.read_csv(done / "divergence.csv"))
    for setting in ("eager", "static"):
        assert "ratio" in (done / f"ar_vs_generate_{setting}.txt").read_text()
    assert {"ar", "eagle", "lyanna"} <= set(pd.read_csv(done / "overheads.csv").method)
    assert set(pd.read_csv(done / "host_sync.csv").variant) >= {"ar", "sd", "eagle", "lyanna"}
    assert (pd.read_csv(done / "projection" / "projection.csv").projected_speedup.notna()).any()
    for name in ("lossless", "ar_vs_generate_eager", "overheads", "host_sync", "projection"):
        assert (done / "benchmarks" / f"{name}.tsv").is_file() and (done / "logs" / f"{name}.log").is_file()
