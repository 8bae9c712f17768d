"""workflow/scripts/gpu_session.py: the GPU steps started detached once and polled (run here on CPU)."""

import importlib.util
import os
import subprocess
import sys
import signal
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "gpu_session.py"
SMOKE = ["--config", str(ROOT / "workflow/config/default.yaml"), str(ROOT / "workflow/config/smoke.yaml"),
         "--device", "cpu"]


def _session_module():
    spec = importlib.util.spec_from_file_location("gpu_session", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _call(state: Path, *options: str) -> subprocess.CompletedProcess:
    """The script called from ``state``'s parent folder, which names it (and the summary) relatively."""
    return subprocess.run([sys.executable, str(SCRIPT), "--state", state.name, *SMOKE, *options], cwd=state.parent,
                          capture_output=True, text=True, timeout=600)


def test_steps_run_in_chain_order_once_and_failed_ones_only_on_retry():
    session = _session_module()
    assert session.chosen_steps("cuda_tests, quick") == ["quick", "cuda_tests"]
    for bad in ("quick,bench", ","):
        with pytest.raises(ValueError):
            session.chosen_steps(bad)
    status = {"quick": {"state": "done"}, "check": {"state": "failed"}, "projection": {"state": "running"}}
    steps = list(session.STEPS)
    assert session.steps_to_run(status, steps, retry=False) == ["projection", "compile", "cuda_tests"]
    assert session.steps_to_run(status, steps, retry=True) == ["check", "projection", "compile", "cuda_tests"]
    assert session.exit_status(status, ["quick"], running=False) == 0
    assert session.exit_status(status, ["quick", "check"], running=False) == 1
    assert session.exit_status(status, ["quick"], running=True) == session.STILL_RUNNING_EXIT


def test_check_and_compile_steps_differ_only_in_compiling():
    session = _session_module()
    args = session.parse_args(["--state", "/tmp/s", "--only", "ar_vs_generate,overheads"])
    [check], [compile_] = session.step_commands("check", args), session.step_commands("compile", args)
    assert check == [*compile_, "--no-compile"]
    assert check[check.index("--only") + 1] == "ar_vs_generate,overheads"
    assert "--extra-tokens" not in check  # gpu_check's own default unless given
    [check] = session.step_commands("check", session.parse_args(["--state", "/tmp/s", "--extra-tokens", "16"]))
    assert check[check.index("--extra-tokens") + 1] == "16"
    # the compile step runs only the parts that measure compiling, of those --only names
    assert session.compiled_parts(None) == ["ar_vs_generate", "overheads"]
    assert session.compiled_parts("host_sync, ar_vs_generate") == ["ar_vs_generate"]
    [compile_all] = session.step_commands("compile", session.parse_args(["--state", "/tmp/s"]))
    assert compile_all[compile_all.index("--only") + 1] == "ar_vs_generate,overheads"
    assert session.step_commands("compile", session.parse_args(["--state", "/tmp/s", "--only", "lossless"])) == []
    assert check[check.index("--out") + 1] == "/tmp/s/check"
    quick = session.step_commands("quick", args)
    assert [command[1].endswith("bench_ar_vs_generate.py") for command in quick] == [True] * 3
    assert quick[0][quick[0].index("--dtype") + 1] == "bfloat16"  # gpu_check.yaml's bench.dtype
    assert quick[1][-4:] == ["--engine", "kv_cache=static", "--reference", "static"]
    [projection] = session.step_commands("projection", args)
    assert projection[projection.index("--summary") + 1] == "/tmp/s/check/results/tables/summary.csv"
    [projection] = session.step_commands("projection", session.parse_args(
        ["--state", "/tmp/s", "--projection-args=--repeats 3 --sizes 1,8"]))
    assert projection[-4:] == ["--repeats", "3", "--sizes", "1,8"]


def test_the_pack_leaves_out_weights_and_files_being_written(tmp_path):
    session = _session_module()
    for name in ("status.json", "quick/eager.txt", "check/results/tables/a.csv", "check/results/tables/b.csv.partial",
                 "check/work/models/target/model.safetensors", "check/work/metrics/m.json", "check/step_seconds.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    packed = [str(path.relative_to(tmp_path)) for path in session.packed_files(tmp_path)]
    assert sorted(packed) == ["check/results/tables/a.csv", "check/step_seconds.json", "check/work/metrics/m.json",
                              "quick/eager.txt", "status.json"]


def test_bad_options_are_refused_before_anything_starts(tmp_path):
    for options in (["--steps", "quick,bench"], ["--config", str(tmp_path / "missing.yaml")]):
        result = subprocess.run([sys.executable, str(SCRIPT), "--state", str(tmp_path / "s"), *options], cwd=ROOT,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and ("bench" in result.stderr or "missing.yaml" in result.stderr)
        assert not (tmp_path / "s" / "status.json").exists()
    # gpu_check.py's --only, refused here rather than after the quick step has run
    for options, error in ((["--only", "overhead"], "no part 'overhead'"),
                           (["--only", "host_sync", "--extra-prompts", "0"], "only bench would run")):
        result = subprocess.run([sys.executable, str(SCRIPT), "--state", str(tmp_path / "s"), *options], cwd=ROOT,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and error in result.stderr, result.stderr
        assert not (tmp_path / "s" / "status.json").exists()


@pytest.mark.slow
def test_the_chain_outlives_the_call_that_started_it_and_runs_each_step_once(tmp_path):
    """The first call returns at once while the chain goes on; a later call waits for it, reports and packs; a
    finished chain is not started again."""
    state, packed = tmp_path / "state", tmp_path / "session.tgz"
    try:
        _chain_then_polls(tmp_path, state, packed)
    finally:
        _stop_chain(state)


def _stop_chain(state: Path) -> None:
    """Kill a chain a failed test left running (its process group)."""
    try:
        os.killpg(int((state / "chain.pid").read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass


def _wait_for_pid(state: Path) -> int:
    deadline = time.monotonic() + 120
    while not (state / "chain.pid").exists() and time.monotonic() < deadline:  # written once it holds the lock
        time.sleep(0.2)
    return int((state / "chain.pid").read_text())


def _chain_then_polls(tmp_path: Path, state: Path, packed: Path) -> None:
    quick = ["--steps", "quick", "--quick-trials", "1", "--quick-tokens", "4", "--pack", str(packed)]
    started = _call(state, *quick, "--wait", "0")
    assert started.returncode == 3, started.stdout + started.stderr  # still running
    assert "chain: running" in started.stdout
    assert os.getsid(_wait_for_pid(state)) != os.getsid(0)  # a session of its own
    done = _call(state, *quick, "--wait", "500")
    assert done.returncode == 0, done.stdout + done.stderr + (state / "logs" / "quick.log").read_text()
    assert "quick       done" in done.stdout
    eager = (state / "quick" / "eager.txt").read_text()
    assert "ratio ours/generate" in eager and "outputs identical in 1/1 trials" in eager
    assert "reference: static" in (state / "quick" / "static_vs_static.txt").read_text()
    assert (state / "quick" / "ops.csv").stat().st_size > 0
    with tarfile.open(packed) as tar:
        names = set(tar.getnames())
    assert {"status.json", "logs/quick.log", "quick/eager.txt", "quick/ops.csv"} <= names
    log_before = (state / "logs" / "quick.log").read_text()
    again = _call(state, *quick, "--wait", "60")
    assert again.returncode == 0 and "chain: not running" in again.stdout
    assert (state / "logs" / "quick.log").read_text() == log_before  # nothing ran again

    failing = ["--steps", "projection", "--summary", "no_summary.csv", "--wait", "300"]
    (state / "status.json").write_text('{"quick": {"state": "failed"}}')  # so that a chain for quick runs again
    _call(state, "--steps", "quick", "--retry", "--quick-trials", "1", "--quick-tokens", "4", "--wait", "0")
    failed = _call(state, *failing)  # waits for the quick chain, then runs its own step
    assert failed.returncode == 1 and "projection  failed" in failed.stdout, failed.stdout + failed.stderr
    assert '"state": "done"' in (state / "status.json").read_text().split('"projection"')[0]  # quick ran first
    assert f"no summary table {tmp_path / 'no_summary.csv'}" in (state / "logs" / "projection.log").read_text()
    _call(state, *failing)  # not run again
    assert (state / "logs" / "projection.log").read_text().count("$ ") == 1
    retried = _call(state, *failing, "--retry")
    assert retried.returncode == 1
    assert (state / "logs" / "projection.log").read_text().count("$ ") == 2


@pytest.mark.slow
def test_a_step_outliving_its_chain_is_not_started_twice(tmp_path):
    """Only the chain is killed (not its step): the step still holds the lock, so a poll reports the chain as
    running and starts nothing beside it; once the step ends, a poll runs it again to the end."""
    state = tmp_path / "state"
    quick = ["--steps", "quick", "--quick-trials", "1", "--quick-tokens", "4"]
    try:
        assert _call(state, *quick, "--wait", "0").returncode == 3
        chain, log = _wait_for_pid(state), state / "logs" / "quick.log"
        deadline = time.monotonic() + 120
        while not (log.exists() and "$ " in log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the step's first command has started (it imports torch for seconds before it runs)
        os.kill(chain, signal.SIGKILL)
        polled = _call(state, *quick, "--wait", "0")
        assert polled.returncode == 3 and "chain: running" in polled.stdout, polled.stdout
        time.sleep(1.0)  # a chain the poll had started would hold the lock and have written its pid by now
        assert int((state / "chain.pid").read_text()) == chain and log.read_text().count("$ ") == 1
        finished = _call(state, *quick, "--wait", "500")
        assert finished.returncode == 0, finished.stdout + finished.stderr
        assert log.read_text().count("$ ") == 1 + 3  # the orphan's command, then the whole step again
    finally:
        _stop_chain(state)
