"""Run a pipeline's steps in one process, resumably: what workflow/scripts/gpu_check.py is made of.

A step names its outputs and is skipped when they all exist, so a killed run resumes. Rule scripts under
workflow/scripts run with the ``snakemake`` object their rule would give them (``Check.script``), benchmark
scripts with a command line (``Check.tool``), ``python -m harness`` commands in this process
(``Check.command``). While ``Check.soft`` is set, a step that fails is recorded and the run goes on.
``StepLedger`` keeps each step's seconds and the failed steps in the output folder over resumed runs.
"""

from __future__ import annotations

import contextlib
import io
import runpy
import sys
import time
import traceback
from pathlib import Path
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from harness.cli import main as harness_cli
from harness.config_files import read_json_object, write_json_object


class NamedValues(list):
    """A list whose items also have names, like the `snakemake.input/output/params` a rule script reads."""

    def __init__(self, items: dict[str, Any] | list[Any]) -> None:
        named = items if isinstance(items, dict) else {}
        super().__init__(named.values() if named else items)
        self._names = dict(named)
        for name, value in named.items():  # instance attributes, so that `output.index` is not list.index
            setattr(self, name, value)

    def keys(self):
        return self._names.keys()

    def get(self, name: str, default: Any = None) -> Any:
        return self._names.get(name, default)


class Check:
    """The steps of one run under ``out`` (work/ and results/), with the seconds each took and the soft failures."""

    def __init__(self, config: dict, out: Path, threads: int, scripts: Path,
                 after_step: Callable[[Check], object] | None = None) -> None:
        self.config, self.threads, self.scripts, self.after_step = config, threads, scripts, after_step
        self.work, self.results = out / "work", out / "results"
        self.seconds: dict[str, float] = {}
        self.failed: dict[str, str] = {}  # soft steps that raised: name -> error
        self.soft = False  # while True, a failing step is recorded and the check goes on

    def w(self, path: str) -> str:
        return str(self.work / path)

    def step(self, name: str, outputs: list[str], action) -> None:
        if all(Path(path).exists() for path in outputs):
            print(f"[skip] {name}: outputs exist")
            return
        for path in outputs:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        print(f"[run ] {name}", flush=True)
        started = time.perf_counter()
        try:
            action()
        except (Exception, SystemExit) as error:  # noqa: BLE001 - a soft step's failure must not stop the others
            if not self.soft:
                raise
            traceback.print_exc()
            self.failed[name] = f"{type(error).__name__}: {error}"
            print(f"[FAIL] {name}: {self.failed[name]}", flush=True)
            for path in map(Path, outputs):  # kept as evidence, out of the way: a rerun runs the step again
                if path.is_file():
                    path.replace(path.with_name(path.name + ".failed"))
            return
        finally:
            self.seconds[name] = time.perf_counter() - started
            if self.after_step is not None:  # also after a failure, and before the next step can be cut off
                self.after_step(self)
        missing = [path for path in outputs if not Path(path).exists()]
        if missing:
            raise SystemExit(f"step {name} did not write {missing[0]}")

    def script(self, name: str, script: str, inputs: dict, outputs: dict | list, params: dict | None = None,
               wildcards: dict | None = None) -> None:
        namespace = SimpleNamespace(input=NamedValues(inputs), output=NamedValues(outputs),
                                    params=NamedValues(params or {}), threads=self.threads,
                                    wildcards=NamedValues(wildcards or {}))
        paths = list(outputs.values()) if isinstance(outputs, dict) else list(outputs)
        self.step(name, paths, lambda: runpy.run_path(str(self.scripts / script), init_globals={"snakemake": namespace},
                                                      run_name="__main__"))

    def tool(self, name: str, script: str, arguments: list[str], outputs: list[str], log: str | None = None) -> None:
        """A benchmark/audit script under workflow/scripts, run in this process; its printed table is also kept
        in ``log``."""
        def run() -> None:
            printed, argv = io.StringIO(), sys.argv
            sys.argv = [str(self.scripts / script), *arguments]
            try:
                with contextlib.redirect_stdout(printed):
                    runpy.run_path(str(self.scripts / script), run_name="__main__")
            finally:  # what it printed is kept even when it fails (a table with a failed row, say)
                sys.argv = argv
                print(printed.getvalue(), flush=True)
                if log:
                    Path(log).write_text(printed.getvalue())
        self.step(name, outputs, run)

    def records_command(self, name: str, records: list[str], arguments: list[str], outputs: list[str]) -> None:
        """``python -m harness <arguments> <records>`` over bench records; while one is missing (its run failed,
        softly) the step fails too, so that the rerun that redoes that run redoes this step as well instead of
        keeping a table built without it."""
        missing = [path for path in records if not Path(path).exists()]
        if missing:
            def fail() -> None:
                raise SystemExit(f"step {name}: {len(missing)} of its records are missing (their runs failed), "
                                 f"{missing[0]} first")
            self.step(name, outputs, fail)
            return
        self.command(name, [arguments[0], *records, *arguments[1:]], outputs)

    def command(self, name: str, arguments: list[str], outputs: list[str]) -> None:
        """``python -m harness <arguments>``, run in this process (no interpreter start-up per step)."""
        def run() -> None:
            code = harness_cli(arguments)
            if code:
                raise SystemExit(f"step {name}: `python -m harness {' '.join(arguments)}` exited with {code}")

        self.step(name, outputs, run)


def merge_step_seconds(earlier: dict[str, float], ran: dict[str, float], seconds: float) -> dict[str, float]:
    """Step seconds after a run into a folder that has some: each step's from the run that last ran it (a resumed
    run skips finished steps); "total" adds this run's ``seconds`` so far to the earlier runs' total."""
    steps = {name: value for name, value in earlier.items() if name != "total"}
    return {**steps, **ran, "total": earlier.get("total", 0.0) + seconds}


def merge_failures(earlier: dict[str, str], attempted: dict[str, float], failed: dict[str, str]) -> dict[str, str]:
    """Failed steps after a run: earlier failures of steps this run did not attempt (still owed: a run of some
    parts only, say), and this run's own."""
    return {**{name: error for name, error in earlier.items() if name not in attempted}, **failed}


class StepLedger:
    """``step_seconds.json`` and ``failed_steps.json`` of a run's output folder, over resumed runs: written after
    every step (``Check(after_step=ledger.write)``), so a run cut off by a time limit leaves what it did."""

    def __init__(self, out: Path) -> None:
        self.seconds_file, self.failed_file = out / "step_seconds.json", out / "failed_steps.json"
        self.earlier_seconds = read_json_object(self.seconds_file)
        self.earlier_failed = read_json_object(self.failed_file)
        self.started = time.perf_counter()

    def write(self, check: Check) -> dict[str, str]:
        """Write both files as of now; return the failed steps (earlier ones still owed included)."""
        seconds = merge_step_seconds(self.earlier_seconds, check.seconds, time.perf_counter() - self.started)
        failed = merge_failures(self.earlier_failed, check.seconds, check.failed)
        write_json_object(self.seconds_file, seconds)
        if failed:
            write_json_object(self.failed_file, failed)
        else:
            self.failed_file.unlink(missing_ok=True)
        return failed
