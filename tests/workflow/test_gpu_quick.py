"""The quick GPU check (target `quick`, workflow/scripts/gpu_quick.sh): its plan on the GPU config (dry run: what
runs, which jobs hold the GPU alone, no calibration), and (slow) the entry script run end to end on a CPU at smoke
size, as on a GPU: README before and after, every stage's outputs, lossless for every catalog method."""

import re
import subprocess

import pytest
import yaml

from harness.catalog import method_names
from tests.workflow.test_workflow import ROOT, job_counts, snakemake

QUICK = ["--configfile", "workflow/config/gpu-quick.yaml"]
CPU = [*QUICK, "workflow/config/gpu-quick-cpu.yaml"]
CPU_LOSSLESS = ["pld"]  # the CPU rehearsal's lossless runs (gpu-quick-cpu.yaml)
CALIBRATION_RULES = {"tree_shape", "sequoia_tree", "measure_latency", "measure_acceptance", "measure_draft_step",
                     "stand_tree"}


def quick_overrides(tmp_path):
    return ["--config", f"work_dir={tmp_path / 'work'}", f"results_dir={tmp_path / 'results'}"]


def gpu_resources(output: str) -> dict[str, set[str]]:
    """rule -> the `gpu=` values its planned jobs ask for (dry run output)."""
    found: dict[str, set[str]] = {}
    for block in output.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0].strip()
        match = re.search(r"gpu=(\d)", block)
        if match:
            found.setdefault(rule, set()).add(match.group(1))
    return found


def test_quick_plan_on_the_gpu_config(tmp_path):
    result = snakemake("-n", "quick", *QUICK, *quick_overrides(tmp_path), "--resources", "gpu=1")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert counts["lossless_run"] == len(method_names()) - 1  # every catalog method but ar, its reference
    assert counts["bench"] == 4 * 2 and "bench_pass" not in counts  # 4 variants x T 0, 1 under graphs; no eager pass
    assert counts["train_drafter"] == 11 and counts["cuda_tests"] == 1
    assert counts["quick_bare_loop"] == counts["quick_dispatch"] == counts["quick_engine_efficiency"] == 1
    assert not CALIBRATION_RULES & set(counts), counts  # fixed tree shapes: no calibration job
    gpu = gpu_resources(result.stdout)
    for timed in ("bench", "quick_bare_loop", "quick_dispatch", "quick_engine_efficiency", "cuda_tests"):  # alone
        assert gpu[timed] == {"1"}, timed
    assert gpu["train_target"] == gpu["train_drafter"] == gpu["lossless_run"] == {"0"}  # the rest share it



def test_the_cuda_stage_names_every_file_that_holds_a_cuda_test():
    """The quick check's CUDA stage runs pytest on named files (collecting the whole suite cost 8 s of the window): a
    test file that marks a test `cuda` and is not named would never run on a GPU."""
    config = yaml.safe_load((ROOT / "workflow" / "config" / "gpu-quick.yaml").read_text())
    named = {argument for argument in config["quick"]["cuda_tests"].split() if argument.endswith(".py")}
    marked = {path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py")
              if re.search(r"pytest\.mark\.cuda\b", path.read_text())}
    assert marked and marked == named

def test_the_control_is_timed_first(tmp_path):
    """A method's timed job waits for the A/A control's runs, and the measurements wait for the timed table."""
    result = snakemake("-n", "quick_timed", *QUICK, *quick_overrides(tmp_path), "--resources", "gpu=1", "--forceall",
                       "--printshellcmds")
    assert result.returncode == 0, result.stderr
    order = [line.split("raw/")[1].split("/")[0] for line in result.stdout.splitlines()
             if "python -m harness run" in line and "raw/" in line]
    assert order[:2] == ["ar_control", "ar_control"] and len(order) == 8, order
    measurements = result.stdout.index("measure bare-loop")
    assert all(result.stdout.index(f"raw/{variant}/") < measurements for variant in ("sd", "eagle", "lyanna"))


def test_quick_stages_split_the_plan(tmp_path):
    """The timed stage trains the models its timed runs need, and nothing of the lossless or CUDA stages; its timed
    jobs wait for every one of those models (no training shares the GPU while a job is timed)."""
    timed = job_counts(snakemake("-n", "quick_timed", *QUICK, *quick_overrides(tmp_path), "--resources",
                                 "gpu=1").stdout)
    assert "lossless_run" not in timed and "cuda_tests" not in timed and timed["bench"] == 8
    assert timed["train_drafter"] == 2  # eagle and lyanna: the timed variants' drafters
    lossless = job_counts(snakemake("-n", "quick_lossless", *QUICK, *quick_overrides(tmp_path)).stdout)
    assert "bench" not in lossless and lossless["lossless_run"] == len(method_names()) - 1


def test_quick_plan_at_cpu_size(tmp_path):
    result = snakemake("-n", "quick", *CPU, *quick_overrides(tmp_path))
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    assert counts["lossless_run"] == len(CPU_LOSSLESS)
    assert "train_drafter" not in counts and "train_draft" not in counts  # model-free methods: the target alone


@pytest.mark.slow
def test_entry_script_runs_the_quick_check_on_cpu(tmp_path):
    out, work = tmp_path / "quick", tmp_path / "work"
    result = subprocess.run(["bash", "workflow/scripts/gpu_quick.sh", "--cpu", "--out", str(out), "--work", str(work),
                             "--cores", "2", "--minutes", "20"], cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    readme = (out / "README.md").read_text()
    assert "State: **finished" in readme and "device: CPU" in readme
    stages = readme.split("## Stages")[1].split("## CUDA tests")[0]
    assert "| none |" not in stages  # every stage wrote its files
    assert "41 skipped" in readme or "skipped" in readme.split("## CUDA tests")[1].split("##")[0]
    assert f"{len(CPU_LOSSLESS)} methods, every output equals its paired ar output" in readme
    speedups = readme.split("## Paired speedups against ar")[1]
    assert "| ar_control | 0 |" in speedups and "| pld | 1 |" in speedups
    assert "ar at " in readme.split("## ar against the engine's floor")[1]  # the bare-loop ratio
    assert "(replay floor)" in readme and "pld" in readme.split("Ops and launches per decoding step")[1]
    assert (out / "checks" / "lossless.csv").is_file() and (out / "report.md").is_file()
    log = (out / "snakemake.log").read_text()
    assert "| eagle_tree | 2 | 2 |" in readme.split("## Engine efficiency")[1]  # tau 2 held exactly
    assert (log.index("stage quick_timed") < log.index("stage quick_engine") < log.index("stage quick_lossless")
            < log.index("stage quick_cuda"))


def test_entry_script_refuses_a_bad_argument():
    result = subprocess.run(["bash", "workflow/scripts/gpu_quick.sh", "--bogus"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 2 and "unknown argument --bogus" in result.stderr
