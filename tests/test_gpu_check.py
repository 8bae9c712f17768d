"""workflow/scripts/gpu_check.py: the pipeline in one command without Snakemake (run here on CPU)."""

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.config_files import read_json_object
from harness.pipeline_steps import Check, StepLedger

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_runs_the_pipeline_without_snakemake(tmp_path):
    """workflow/scripts/gpu_check.py on CPU with the smoke config trimmed further: the same steps and commands as
    the workflow, ending in the tables, figures and report, then the GPU issue's checks at a tiny size."""
    trim = tmp_path / "trim.yaml"
    trim.write_text(yaml.safe_dump({
        "target": {"train": {"time_budget_s": 10}}, "draft": {"train": {"time_budget_s": 5}},
        "drafters": {"eagle": {"time_budget_s": 3}, "lyanna": {"time_budget_s": 3}},
        "bench": {"only": ["ar", "sd", "tree_sd_sequoia", "eagle", "lyanna"]},
    }))
    args = [sys.executable, "workflow/scripts/gpu_check.py", "--out", str(tmp_path / "check"), "--device", "cpu",
            "--threads", "2", "--extra-prompts", "2", "--extra-tokens", "16", "--config", "workflow/config/default.yaml", "workflow/config/smoke.yaml", str(trim)]
    results = tmp_path / "check" / "results"
    tables = results / "tables"
    # first only two parts (what a GPU session short of time runs), then the whole check into the same folder
    part = subprocess.run([*args, "--only", "host_sync,ar_vs_generate"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert part.returncode == 0, part.stdout[-3000:] + part.stderr[-3000:]
    assert sorted(path.name for path in tables.iterdir()) == [
        "ar_vs_generate_eager.txt", "ar_vs_generate_profile.csv", "ar_vs_generate_profile.txt",
        "ar_vs_generate_static.txt", "ar_vs_generate_static_vs_static.txt", "host_sync.csv"]
    assert not (results / "report.md").exists() and not (results / "raw").exists()
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[run ] train target" not in result.stdout and "[run ] host-sync audit" not in result.stdout
    summary = pd.read_csv(results / "tables" / "summary.csv")
    assert sorted(summary.variant) == ["ar", "eagle", "lyanna", "sd", "tree_sd_sequoia"]
    assert (results / "figures" / "speedup.png").stat().st_size > 10_000
    assert "| eagle | stdlib_code | 0 |" in (results / "report.md").read_text()
    for engine in ("eager", "static"):  # on CUDA: eager and graphs
        lossless = pd.read_csv(tables / f"lossless_float32_{engine}.csv")
        assert sorted(lossless.variant) == ["eagle", "lyanna", "sd", "tree_sd_sequoia"] and lossless.diverged.sum() == 0
    assert set(pd.read_csv(tables / "divergence.csv").variant) == {"eagle", "lyanna", "sd", "tree_sd_sequoia"}
    overheads = pd.read_csv(tables / "overheads.csv")
    assert set(overheads.setting) == {"eager", "static_cache"} and (overheads.tokens_per_s > 0).all()
    assert (overheads[overheads.method == "ar"].speedup_over_ar == 1.0).all()
    assert "outputs identical in 2/2 trials" in (tables / "ar_vs_generate_static.txt").read_text()
    assert "reference: static" in (tables / "ar_vs_generate_static_vs_static.txt").read_text()
    profile = pd.read_csv(tables / "ar_vs_generate_profile.csv").set_index("op")
    assert profile.loc["(all host ops)", "ours_calls"] > 0 and profile.loc["aten::mm", "generate_calls"] > 0
    assert profile.loc["(wall)", "ours_self_cpu_us"] > profile.loc["(all host ops)", "ours_self_cpu_us"]
    static = pd.read_csv(tables / "summary_static.csv")  # the benchmark again with the switches (CUDA: graphs)
    assert sorted(static.variant) == sorted(summary.variant) and (static.tokens_per_s > 0).all()
    audit = pd.read_csv(tables / "host_sync.csv").set_index(["variant", "temperature"])
    assert audit.loc[("ar", 0.0), "reads_per_step"] == 1.0
    steps = json.loads((tmp_path / "check" / "step_seconds.json").read_text())
    # every step's seconds, from the run that ran it
    assert {"train target", "train drafter lyanna", "host-sync audit", "bench eagle stdlib_code t0", "report"} <= \
        set(steps)
    again = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "[run ]" not in again.stdout  # every step's outputs exist: nothing reruns


def test_soft_steps_report_failures_and_let_the_rest_run(tmp_path):
    """After the report, gpu_check's measurement steps are soft: one that fails is recorded, the next still runs;
    before it, a failure stops the check."""
    check = Check({}, tmp_path, threads=1, scripts=ROOT / "workflow" / "scripts")

    def fail() -> None:
        raise RuntimeError("no CUDA graph today")

    with pytest.raises(RuntimeError):
        check.step("hard", [str(tmp_path / "a")], fail)
    check.soft = True

    def write_then_fail() -> None:  # a measurement that writes its table, then reports a failed row
        (tmp_path / "b").write_text("partial table")
        fail()

    check.step("soft", [str(tmp_path / "b")], write_then_fail)
    check.step("next", [str(tmp_path / "c")], lambda: (tmp_path / "c").write_text("ran"))
    assert check.failed == {"soft": "RuntimeError: no CUDA graph today"} and (tmp_path / "c").read_text() == "ran"
    # what the failed step wrote is kept aside, so a rerun runs it again rather than skipping it
    assert not (tmp_path / "b").exists() and (tmp_path / "b.failed").read_text() == "partial table"


def test_a_table_over_records_waits_for_all_of_them(tmp_path):
    """A table built over bench records (a summary, a lossless check) fails while one of its records is missing
    (its run failed, softly), so a rerun that redoes that run rebuilds the table instead of keeping a partial one."""
    check = Check({}, tmp_path, threads=1, scripts=ROOT / "workflow" / "scripts")
    check.soft = True
    records = [str(tmp_path / "ar.jsonl"), str(tmp_path / "sd.jsonl")]
    (tmp_path / "ar.jsonl").write_text("{}\n")
    table = str(tmp_path / "summary.csv")
    check.records_command("summary", records, ["summarize", "--out", table], [table])
    assert "summary" in check.failed and "sd.jsonl" in check.failed["summary"] and not Path(table).exists()
    ran = []
    check.command = lambda name, arguments, outputs: ran.append(arguments)  # the harness command it would run
    (tmp_path / "sd.jsonl").write_text("{}\n")
    check.records_command("summary", records, ["summarize", "--out", table], [table])
    assert ran == [["summarize", *records, "--out", table]]


def test_only_names_parts_of_the_check():
    gpu_check = runpy.run_path(str(ROOT / "workflow" / "scripts" / "gpu_check.py"), run_name="gpu_check_module")
    parse_groups = gpu_check["parse_groups"]
    assert parse_groups(None, 4) == frozenset(gpu_check["GROUPS"])
    assert parse_groups(" overheads, ar_vs_generate ,overheads", 4) == {"overheads", "ar_vs_generate"}
    assert parse_groups("bench", 0) == {"bench"}
    for text, error in (("overhead,Bench", "no part 'overhead', 'Bench'.*overheads"), (" , ", "names no part"),
                        ("", "names no part")):
        with pytest.raises(ValueError, match=error):
            parse_groups(text, 4)
    with pytest.raises(ValueError, match="only bench would run"):  # the checks after the report are off
        parse_groups("bench,host_sync", 0)


def test_the_step_ledger_keeps_seconds_and_owed_failures_over_resumed_runs(tmp_path):
    """step_seconds.json and failed_steps.json are rewritten after every step, over earlier runs' files: a run cut
    off by a time limit leaves what it did, and a run of some parts only does not forget failures it did not retry."""
    ledger = StepLedger(tmp_path)
    check = Check({}, tmp_path, threads=1, scripts=ROOT / "workflow" / "scripts", after_step=ledger.write)
    check.soft = True
    check.step("train target", [str(tmp_path / "model")], lambda: (tmp_path / "model").write_text("weights"))
    assert set(json.loads((tmp_path / "step_seconds.json").read_text())) == {"train target", "total"}

    def fail() -> None:
        raise RuntimeError("capture failed")

    check.step("overheads", [str(tmp_path / "overheads.csv")], fail)
    check.step("host-sync audit", [str(tmp_path / "host_sync.csv")], fail)
    assert set(json.loads((tmp_path / "failed_steps.json").read_text())) == {"overheads", "host-sync audit"}
    first_total = json.loads((tmp_path / "step_seconds.json").read_text())["total"]
    # a later run of one part: the audit now works, the overheads were not retried and are still owed
    (tmp_path / "step_seconds.json").write_text(json.dumps({"train target": 90.0, "overheads": 1.0,
                                                            "host-sync audit": 1.0, "total": 100.0}))
    again = StepLedger(tmp_path)
    rerun = Check({}, tmp_path, threads=1, scripts=ROOT / "workflow" / "scripts", after_step=again.write)
    rerun.step("train target", [str(tmp_path / "model")], fail)  # outputs exist: skipped, not timed
    rerun.step("host-sync audit", [str(tmp_path / "host_sync.csv")], lambda: (tmp_path / "host_sync.csv").touch())
    failed = again.write(rerun)
    assert failed == {"overheads": "RuntimeError: capture failed"} and first_total < 100.0
    seconds = json.loads((tmp_path / "step_seconds.json").read_text())
    assert seconds["train target"] == 90.0 and seconds["overheads"] == 1.0 and seconds["host-sync audit"] < 1.0
    assert 100.0 <= seconds["total"] < 110.0
    (tmp_path / "step_seconds.json").write_text('{"total": 3')  # cut off while writing: read as empty, not fatal
    assert read_json_object(tmp_path / "step_seconds.json") == {}
