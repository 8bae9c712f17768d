"""An interrupted run resumes with the same command (README, *Interrupted?*): a smoke run hard-killed (SIGKILL of
Snakemake's process group) while its target trains leaves Snakemake's lock, which `snakemake --unlock` as typed (no
--cores) clears, and the same command then keeps the finished jobs, resumes the training from its checkpoint and
finishes (the profiles' `rerun-incomplete`). In a copy of the project: its lock and .snakemake/ are its own, since
`--unlock` clears every lock of its working directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import copy_project
from tests.workflow.test_workflow import SNAKEMAKE

TARGET = "work-smoke/metrics/target.json"  # the smoke target's training job (rule train_target) and what it needs
COMMAND = [*SNAKEMAKE, "--cores", "1", "--profile", "workflow/profiles/smoke", TARGET]


def run(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SNAKEMAKE, *args], cwd=project, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_run_killed_in_training_resumes_with_the_same_command(tmp_path):
    project = tmp_path / "project"
    copy_project(project)
    smoke = project / "workflow" / "config" / "smoke.yaml"  # a checkpoint every 0.2 s: one exists mid-training
    config = yaml.safe_load(smoke.read_text())
    config["target"]["train"]["checkpoint_every_s"] = 0.2
    smoke.write_text(yaml.safe_dump(config, sort_keys=False))
    work, log = project / "work-smoke", tmp_path / "first.log"
    checkpoint = work / "checkpoints" / "target.pt"
    with log.open("w") as handle:
        process = subprocess.Popen(COMMAND, cwd=project, stdout=handle, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        deadline = time.time() + 240
        while time.time() < deadline and not checkpoint.exists() and process.poll() is None:
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert checkpoint.exists() and not (work / TARGET.removeprefix("work-smoke/")).exists(), log.read_text()[-3000:]
    finished = {path: path.stat().st_mtime_ns for path in (work / "data").rglob("*") if path.is_file()}
    assert finished  # the corpus and the token streams, done before the training began

    locked = subprocess.run(COMMAND, cwd=project, capture_output=True, text=True, timeout=300)
    assert locked.returncode != 0 and "--unlock" in locked.stdout + locked.stderr  # the lock outlives the kill
    unlocked = run(project, "--unlock")  # as typed: no --cores, no profile (the default one)
    assert unlocked.returncode == 0, unlocked.stdout[-2000:] + unlocked.stderr[-2000:]
    resumed = subprocess.run(COMMAND, cwd=project, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resuming train target from step" in resumed.stdout + resumed.stderr  # from the killed run's checkpoint
    assert {path: path.stat().st_mtime_ns for path in finished} == finished  # the finished jobs were kept
    assert (work / "models" / "target" / "config.json").is_file() and (work / "metrics" / "target.json").is_file()
    metrics = json.loads((work / "metrics" / "target.json").read_text())
    assert metrics["grown_from"]["training"]["resumed_from_step"] > 0  # the killed stage: the base, before growth


def test_unlock_runs_as_typed_and_the_profiles_rerun_incomplete_jobs(tmp_path):
    """`snakemake --unlock` with no --cores (rules whose threads are all the cores once stopped it: "Workflow requires
    a total number of cores to be defined"), and every profile reruns the jobs a kill left incomplete."""
    copy_project(tmp_path)
    result = run(tmp_path, "--unlock")
    assert result.returncode == 0 and "Unlocked" in result.stdout + result.stderr, result.stderr[-2000:]
    for profile in ("default", "smoke", "gpu", "slurm"):
        settings = yaml.safe_load((tmp_path / "workflow" / "profiles" / profile / "config.yaml").read_text())
        assert settings["rerun-incomplete"] is True, profile
