"""The GPU measurements in steps that outlive a command time limit: start them detached once, poll until done.

On a machine whose commands are cut after a few minutes (a lent GPU box with a 10-minute limit per command, a
cluster node reached through short jobs), the GPU check and its companions take longer than one command may.
The first call starts a chain of steps in its own session (detached from the calling shell, so the command's
end does not stop it); the chain runs the steps one after another, each once. Every call waits up to --wait
seconds for the chain, prints each step's state and the tail of the running step's log, and with --pack
writes what the steps produced (tables, figures, logs, metrics; no model weights) to a .tar.gz. Call it again
with the same --state until it says the chain has finished.

    python workflow/scripts/gpu_session.py --state /tmp/session --pack /tmp/session.tgz --wait 540
    python workflow/scripts/gpu_session.py --state /tmp/session --only ar_vs_generate,overheads \\
        --summary results/h100-2026-11-24/tables/summary.csv         # only parts of the check, say

Steps (--steps picks some; they always run in this order):
  quick       our `ar` against model.generate() on a random-weight target shaped like the check's (no
              training): eager, both on static caches, and the op profile (bench_ar_vs_generate.py)
  check       gpu_check.py --no-compile into STATE/check (--only: some parts of it)
  projection  project_8b.py: the 8B-shape latencies and the projection from --summary (default: the check's)
  compile     gpu_check.py again with torch.compile, only the parts that measure it (ar_vs_generate,
              overheads; of those --only names): only the compile measurements run, the rest is done
  cuda_tests  pytest -m cuda
A step that fails is marked failed and the chain goes on; later calls do not run it again unless --retry.
A call finding a chain already running (started with other --steps, say) waits for it, then starts its own
for its steps still to run. Keep --wait below the command time limit, or the call is cut before it reports.
A finished step never runs again (delete the state folder to start over). Exit status: 0 when every chosen
step has finished, 1 when the chain has ended with a failed step, 3 while it is still running. To stop the
chain and what it runs: kill -- -$(cat STATE/chain.pid) (a chain that a second, racing poll queued behind it
then runs what is left: kill it the same way).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.atomic import atomic_path  # noqa: E402
from harness.check_parts import COMPILED_PARTS, named_parts, parse_groups  # noqa: E402
from harness.config_files import read_configs, read_json_object, write_json_object  # noqa: E402

SCRIPTS = ROOT / "workflow" / "scripts"
STEPS = ("quick", "check", "projection", "compile", "cuda_tests")
PACKED = ("status.json", "options.json", "chain.log", "logs", "quick", "projection", "check/results",
          "check/work/metrics", "check/work/tree", "check/step_seconds.json", "check/failed_steps.json")
QUICK_OUTPUTS = ("eager.txt", "static_vs_static.txt", "profile.txt")  # what each quick command prints
RUNNING, STILL_RUNNING_EXIT = "running", 3
POLL_SECONDS = 2.0


def step_commands(step: str, args: argparse.Namespace) -> list[list[str]]:
    """The commands (argv lists, run in the repository root) of ``step`` under the options ``args``."""
    python, state = sys.executable, args.state
    configs = [str(path) for path in args.config]
    if step == "quick":
        bench = [python, str(SCRIPTS / "bench_ar_vs_generate.py"), "--random-shape", *configs,
                 "--device", args.device, "--dtype", args.dtype, "--trials", str(args.quick_trials),
                 "--new-tokens", str(args.quick_tokens)]
        return [[*bench], [*bench, "--engine", "kv_cache=static", "--reference", "static"],
                [*bench, "--trials", "2", "--profile-out", str(state / "quick" / "ops.csv")]]
    check = [python, str(SCRIPTS / "gpu_check.py"), "--out", str(state / "check"), "--config", *configs,
             "--device", args.device, "--extra-prompts", str(args.extra_prompts),
             *(["--extra-tokens", str(args.extra_tokens)] if args.extra_tokens else [])]
    if step == "check":
        return [[*check, *(["--only", args.only] if args.only else []), "--no-compile"]]
    if step == "compile":  # only the parts that measure compiling: a part the check left failed is not redone
        parts = compiled_parts(args.only)
        return [[*check, "--only", ",".join(parts)]] if parts else []
    if step == "projection":
        summary = args.summary or str(state / "check" / "results" / "tables" / "summary.csv")
        return [[python, str(SCRIPTS / "project_8b.py"), "--summary", summary, "--out-dir",
                 str(state / "projection"), "--device", args.device, *shlex.split(args.projection_args)]]
    if step == "cuda_tests":
        return [[python, "-m", "pytest", "tests/test_cuda.py", "-m", "cuda", "-q", "-p", "no:cacheprovider"]]
    raise ValueError(f"unknown step {step!r}")


def compiled_parts(only: str | None) -> list[str]:
    """The gpu_check parts with torch.compile measurements, of those ``only`` names (None: all parts)."""
    named = named_parts(only)
    return [part for part in COMPILED_PARTS if part in named]


def chosen_steps(text: str) -> list[str]:
    """--steps as a list in chain order; unknown names are an error."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(STEPS))
    if unknown or not names:
        raise ValueError(f"--steps: unknown {unknown} (known: {', '.join(STEPS)})" if unknown else
                         "--steps names no step")
    return [step for step in STEPS if step in names]


def steps_to_run(status: dict, steps: list[str], retry: bool) -> list[str]:
    """The chosen steps the chain still has to run: not finished, and not failed unless ``retry``."""
    settled = ("done",) if retry else ("done", "failed")
    return [step for step in steps if status.get(step, {}).get("state") not in settled]


def run_command(command: list[str], output, lock_fd: int) -> int:
    """Run ``command`` in the repository root, its output into the open file ``output``; its exit status (127
    when it cannot be started). It inherits the chain's lock (``lock_fd``): should the chain die, its step still
    holds the lock while it runs, so no poll starts the step a second time beside it."""
    try:
        return subprocess.call(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               pass_fds=(lock_fd,))
    except OSError as error:
        output.write(f"cannot start it: {error}\n")
        return 127


def run_step(step: str, args: argparse.Namespace, state: Path, status: dict, lock_fd: int) -> None:
    """Run ``step``'s commands in order (stop at the first that fails) into logs/STEP.log; record the outcome."""
    log = state / "logs" / f"{step}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    started = time.time()
    status[step] = {"state": RUNNING, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    write_json_object(state / "status.json", status)
    returncode = 0
    commands = step_commands(step, args)
    with log.open("a") as handle:
        if not commands:
            handle.write("nothing to run: --only names none of this step's parts\n")
        for index, command in enumerate(commands):
            handle.write(f"$ {' '.join(command)}\n")
            handle.flush()
            if step == "quick":  # its printout is its result: kept apart, and copied into the log
                printed = state / "quick" / QUICK_OUTPUTS[index]
                printed.parent.mkdir(exist_ok=True)
                with printed.open("w") as output:
                    returncode = run_command(command, output, lock_fd)
                handle.write(printed.read_text(errors="replace"))
            else:
                returncode = run_command(command, handle, lock_fd)
            handle.write(f"# exit status {returncode}\n")
            if returncode != 0:
                break
    status[step] = {"state": "done" if returncode == 0 else "failed", "returncode": returncode,
                    "seconds": round(time.time() - started, 1), "started": status[step]["started"]}
    write_json_object(state / "status.json", status)


def run_chain(args: argparse.Namespace, state: Path) -> None:
    """The detached chain: wait for the lock (another chain may hold it), then run every step still to run, in
    order (what a chain before it finished is not run again)."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with (state / "chain.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # after any chain already running here (two polls may start one each)
        (state / "chain.pid").write_text(f"{os.getpid()}\n")  # its process group's id too (kill -- -PID)
        write_json_object(state / "options.json", vars(args))  # what this chain runs
        status = read_json_object(state / "status.json")
        for step in steps_to_run(status, chosen_steps(args.steps), args.retry):
            run_step(step, args, state, status, lock.fileno())


def chain_is_running(state: Path) -> bool:
    """Whether a chain holds this state folder's lock."""
    path = state / "chain.lock"
    if not path.exists():
        return False
    with path.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
    return False


def start_chain(argv: list[str], state: Path) -> subprocess.Popen:
    """This script with ``--run-chain``, in a session of its own (it outlives the calling command), in the
    caller's folder (``argv`` may name paths relative to it)."""
    with (state / "chain.log").open("a") as log:
        return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *argv, "--run-chain"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def packed_files(state: Path) -> list[Path]:
    """The files ``pack`` takes: under ``PACKED``, not the ``.partial`` ones a running step is writing."""
    files = []
    for name in PACKED:
        path = state / name
        found = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        files += [file for file in found if file.is_file() and not file.name.endswith(".partial")]
    return files


def pack(state: Path, destination: Path) -> None:
    """What the steps produced, without model weights, as a .tar.gz at ``destination`` (while the chain runs,
    a file that a step replaces or removes in the meantime is left out)."""
    with atomic_path(destination) as partial, tarfile.open(partial, "w:gz") as tar:
        for file in packed_files(state):
            try:
                tar.add(file, arcname=str(file.relative_to(state)))
            except FileNotFoundError:
                continue


def report(state: Path, steps: list[str], running: bool) -> str:
    """Each chosen step's state (and seconds), and the last lines of the running step's log."""
    status = read_json_object(state / "status.json")
    lines = [f"chain: {'running' if running else 'not running'}"]
    for step in steps:
        entry = status.get(step, {})
        seconds = f" {entry['seconds']} s" if "seconds" in entry else ""
        shown = entry.get("state", "pending")
        if shown == RUNNING and not running:
            shown = "interrupted (it runs again on the next call)"
        lines.append(f"  {step:<11} {shown}{seconds}")
    current = [step for step in steps if status.get(step, {}).get("state") == RUNNING]
    unfinished = [step for step in steps if status.get(step, {}).get("state") not in ("done", "failed")]
    if current and running:
        lines += last_lines(state / "logs" / f"{current[0]}.log")
    elif unfinished and not running:  # the chain ended with steps not run: its own log says why
        lines += last_lines(state / "chain.log")
    return "\n".join(lines)


def last_lines(log: Path, count: int = 15) -> list[str]:
    if not log.is_file():
        return []
    return [f"--- last lines of {log.parent.name}/{log.name}", *log.read_text(errors="replace").splitlines()[-count:]]


def exit_status(status: dict, steps: list[str], running: bool) -> int:
    if running:
        return STILL_RUNNING_EXIT
    return 0 if all(status.get(step, {}).get("state") == "done" for step in steps) else 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", required=True, type=Path, help="folder of the chain's state, logs and outputs")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of: {', '.join(STEPS)}")
    parser.add_argument("--wait", type=float, default=0, help="seconds to wait for the chain before reporting")
    parser.add_argument("--pack", type=Path, help="write the outputs (no weights) to this .tar.gz")
    parser.add_argument("--retry", action="store_true", help="run failed steps again")
    parser.add_argument("--config", nargs="+", type=Path, default=[ROOT / "workflow/config/default.yaml",
                                                                   ROOT / "workflow/config/gpu_check.yaml"],
                        help="workflow config files, merged in order (default: default.yaml, gpu_check.yaml)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", help="the quick step's dtype (default: the config's bench.dtype)")
    parser.add_argument("--only", help="gpu_check.py --only for the check and compile steps (checked before anything "
                                       "starts)")
    parser.add_argument("--extra-prompts", type=int, default=4, help="gpu_check.py --extra-prompts")
    parser.add_argument("--extra-tokens", type=int, help="gpu_check.py --extra-tokens (default: its own)")
    parser.add_argument("--quick-trials", type=int, default=8)
    parser.add_argument("--quick-tokens", type=int, default=128)
    parser.add_argument("--summary", help="project_8b.py --summary (default: the check's summary.csv)")
    parser.add_argument("--projection-args", default="",
                        help="more project_8b.py options, as one string: --projection-args='--repeats 3'")
    parser.add_argument("--run-chain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # the steps run in the repository root: paths given relative to the caller's folder are made absolute
    args.state, args.config = args.state.resolve(), [path.resolve() for path in args.config]
    args.summary = str(Path(args.summary).resolve()) if args.summary else None
    try:
        chosen_steps(args.steps)
        parse_groups(args.only, args.extra_prompts)  # as gpu_check.py will, before the quick step spends minutes
        config = read_configs(args.config)
    except Exception as error:  # noqa: BLE001 - any bad option is the caller's error
        parser.error(str(error))
    args.dtype = args.dtype or str(config.get("bench", {}).get("dtype", "float32"))  # the check's own
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    state = args.state
    state.mkdir(parents=True, exist_ok=True)
    if args.run_chain:
        run_chain(args, state)
        return 0
    steps = chosen_steps(args.steps)
    chain = None
    deadline = time.monotonic() + args.wait
    while True:
        running = chain_is_running(state) or (chain is not None and chain.poll() is None)
        if not running and chain is None and steps_to_run(read_json_object(state / "status.json"), steps,
                                                          args.retry):
            chain, running = start_chain(argv, state), True  # once per call; after any chain already running
        if not running or time.monotonic() >= deadline:
            break
        time.sleep(POLL_SECONDS)
    print(report(state, steps, running), flush=True)
    if args.pack:
        try:
            pack(state, args.pack)
            print(f"packed into {args.pack}")
        except OSError as error:
            print(f"could not pack into {args.pack}: {error}", file=sys.stderr)
    return exit_status(read_json_object(state / "status.json"), steps, running)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
