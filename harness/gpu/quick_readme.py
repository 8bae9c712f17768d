"""The quick GPU check's README (``python -m harness quick-readme``): what ran, on which device, with which versions,
which stages finished (and when), and their figures. Written when the check starts and again when it ends, from
whatever is in its folder, so a check stopped at its time limit still says what it got."""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.analysis.divergence import divergence_table
from harness.analysis.report import training_section
from harness.analysis.tables import markdown_table
from harness.analysis.trust import trust_warnings, warning_block


@dataclass(frozen=True)
class Stage:
    name: str
    pattern: str  # files under the results folder (a glob) the stage writes
    what: str


STAGES = (  # in the order gpu_quick.sh runs them: quick_timed, quick_engine, quick_lossless, quick_cuda
    Stage("bench", "raw/*/*.jsonl", "1: timed paired runs under bench.engine, alone on the GPU (ar_control first)"),
    Stage("summary", "tables/summary.csv", "1: per variant and temperature"),
    Stage("report", "report.md", "1: the report: tables, phases, figures"),
    Stage("bare loop", "checks/bare_loop.txt", "1: `measure bare-loop`: ar against the engine's floor"),
    Stage("dispatch", "checks/dispatch.csv", "1: `measure dispatch`: ops and kernel launches per step"),
    Stage("engine efficiency", "checks/engine_efficiency.csv", "2: `measure engine-efficiency`: measured against "
                                                               "predicted speedup at tau 2-6, random 8B shapes"),
    Stage("lossless runs", "checks/lossless/*.jsonl", "3: every catalog method, float32, greedy, paired with ar"),
    Stage("lossless table", "checks/lossless.csv", "3: `harness divergence --expect-identical` over those runs"),
    Stage("cuda tests", "checks/pytest_cuda.txt*", "4: `pytest -m cuda`, with the time left (.partial: cut short)"),
)
SPEEDUP_COLUMNS = ("variant", "temperature", "turns", "tau", "tokens_per_s", "speedup_paired_mean",
                   "speedup_ci_low", "speedup_ci_high", "speedup_bound", "phase_target_per_token",
                   "phase_drafter_per_token", "phase_verify_per_token", "phase_host_per_token")


def stage_rows(results: Path, started: float) -> list[list[str]]:
    """One row per stage: its files found, and when the last of them was written (seconds after the start)."""
    rows = []
    for stage in STAGES:
        files = sorted(results.glob(stage.pattern))
        finished = f"+{max(f.stat().st_mtime for f in files) - started:.0f} s" if files else "-"
        rows.append([stage.name, stage.what, str(len(files)) if files else "none", finished])
    return rows


def cuda_test_lines(results: Path) -> list[str]:
    """The CUDA suite's closing line and exit status (the rule appends it); for a suite stopped at the window's end
    (only its ``.partial`` file), the verdicts written so far (``-v``: one line per test); or why there is none."""
    path = results / "checks" / "pytest_cuda.txt"
    partial = path.with_name(path.name + ".partial")
    if not path.is_file() and not partial.is_file():
        return ["not started"]
    lines = [line for line in (path if path.is_file() else partial).read_text(errors="replace").splitlines()
             if line.strip()]
    if not path.is_file():
        verdicts = {word: sum(f" {word}" in line for line in lines) for word in ("PASSED", "FAILED", "SKIPPED", "ERROR")}
        failed = [line.split(" ")[0] for line in lines if " FAILED" in line or " ERROR" in line]
        return [f"stopped at the window's end: {', '.join(f'{n} {w.lower()}' for w, n in verdicts.items())} so far",
                *(f"- failed: `{name}`" for name in failed)]
    closing = [line for line in lines if " passed" in line or " failed" in line or " skipped" in line
               or " error" in line]
    status = [line for line in lines if line.startswith("exit status")]
    return [f"`{(closing or lines or ['(empty)'])[-1].strip()}`", *(f"`{line}`" for line in status[-1:])]


def lossless_section(results: Path) -> str:
    files = sorted((results / "checks" / "lossless").glob("*.jsonl"))
    if not files:
        return "No lossless run finished."
    table = divergence_table(files)
    rows = [[row.variant, row.dtype, str(row.pairs), str(row.diverged)] for row in table.itertuples()]
    verdict = ("every output equals its paired ar output" if not int(table["diverged"].sum())
               else f"**{int(table['diverged'].sum())} outputs differ from ar**")
    return f"{len(files)} methods, {verdict}.\n\n" + markdown_table(["variant", "dtype", "pairs", "diverged"], rows)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.3g}"
    return str(value)


def speedup_section(results: Path) -> str:
    """The paired speedups under the run's engine (CUDA graphs on a GPU)."""
    path = results / "tables" / "summary.csv"
    if not path.is_file():
        return "No speedup table: the bench jobs did not finish."
    table = pd.read_csv(path)
    columns = [c for c in SPEEDUP_COLUMNS if c in table.columns]
    rows = [[_cell(value) for value in row] for row in table[columns].itertuples(index=False)]
    return markdown_table(columns, rows)


def measurement_section(results: Path, name: str, lines: int) -> str:
    """The closing ``lines`` lines of a measurement's printout (``checks/<name>``), as a code block."""
    path = results / "checks" / name
    if not path.is_file():
        return "Not finished."
    text = [line for line in path.read_text(errors="replace").splitlines()
            if line.strip() and "warn" not in line.lower() and "it/s]" not in line]  # no progress bars
    return "```\n" + "\n".join(text[-lines:]) + "\n```"


def efficiency_section(results: Path) -> str:
    """``measure engine-efficiency``'s table (as far as it got)."""
    path = results / "checks" / "engine_efficiency.csv"
    if not path.is_file():
        return "Not finished."
    table = pd.read_csv(path)
    columns = ["variant", "tau", "tau_measured", "verified_per_step", "draft_ms", "verify_ms", "measured_speedup",
               "predicted_speedup", "efficiency", "identical"]
    rows = [[_cell(value) for value in row] for row in table[columns].itertuples(index=False)]
    labels = ", ".join(str(table[name].iloc[0]) for name in ("shape", "dtype", "timing"))
    return f"{labels}.\n\n" + markdown_table(columns, rows)


def environment_lines() -> list[str]:
    import importlib.metadata

    import torch

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "absent"

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.processor() or 'cpu'})"
    return [f"- device: {device}", f"- Python {platform.python_version()}, torch {torch.__version__} (CUDA "
            f"{torch.version.cuda or 'none'}), transformers {version('transformers')}, snakemake {version('snakemake')}"]


def warning_lines(results: Path, work: Path) -> list[str]:
    """The report's warning block for what finished: the control, weak models let through, diverged turns."""
    summary_path = results / "tables" / "summary.csv"
    summary = pd.read_csv(summary_path) if summary_path.is_file() else pd.DataFrame(
        columns=["variant", "speedup_paired_mean", "diverged_turns"])
    block = warning_block(trust_warnings(summary, sorted((work / "metrics").glob("*.json"))))
    return [block, ""] if block else []


def quick_readme(results: Path, work: Path, started: float, state: str, command: str, commit: str) -> str:
    """The README of a quick check's folder in its current state (running, finished, timed out, failed)."""
    parts = [
        "# The quick GPU check",
        "",
        f"State: **{state}**. Command: `{command}` at commit `{commit}`.",
        "",
        *warning_lines(results, work),
        *environment_lines(),
        "",
        "## Stages",
        "",
        markdown_table(["stage", "what", "files", "finished at"], stage_rows(results, started)),
        "",
        "## CUDA tests",
        "",
        *cuda_test_lines(results),
        "",
        "## Lossless (float32, greedy, default engine)",
        "",
        lossless_section(results),
        "",
        "## Paired speedups against ar",
        "",
        "Geometric mean of per-turn ratios against `ar` in the same process, with a prompt-bootstrap 95% interval; "
        "`ar_control` is `ar` against `ar`. Phase columns: seconds per new token.",
        "",
        speedup_section(results),
        "",
        "## ar against the engine's floor (`measure bare-loop` on the trained target)",
        "",
        "`replay` replays one captured decoding step per token (forward, mask, argmax on the device) and reads each "
        "token: the floor of an engine that reads its tokens. `bare` is a plain eager loop. Goal on a GPU: ar >= 0.8x "
        "of replay.",
        "",
        measurement_section(results, "bare_loop.txt", 14),
        "",
        "## Ops and launches per decoding step (`measure dispatch`, random models)",
        "",
        "ATen ops dispatched outside graphed forwards per step, by phase (each about one kernel launch in eager "
        "CUDA); on a GPU the profiler's kernel launches outside graphs against graph launches per step.",
        "",
        measurement_section(results, "dispatch.txt", 24),
        "",
        "## Engine efficiency at Llama-3.1-8B's shape (`measure engine-efficiency`, random models)",
        "",
        ("Each method drafts with its own code and a random drafter of its real shape; an oracle replaces its "
         "proposals by the target's continuation so that a step emits tau tokens. Efficiency: the measured speedup "
         "over ar divided by the one its measured forwards predict (1: an engine that costs its forwards alone). "
         "Goal on a GPU: >= 0.85 for every method."),
        "",
        efficiency_section(results),
        "",
        "## Models",
        "",
        training_section(sorted((work / "metrics").glob("*.json"))) or "No model finished training.",
        "",
    ]
    return "\n".join(parts)
