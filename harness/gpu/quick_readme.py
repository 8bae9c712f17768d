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


STAGES = (
    Stage("cuda tests", "checks/pytest_cuda.txt", "`pytest -m cuda` (beside the zoo's training)"),
    Stage("lossless runs", "checks/lossless/*.jsonl", "every catalog method, float32, greedy, paired with ar"),
    Stage("lossless table", "checks/lossless.csv", "`harness divergence --expect-identical` over those runs"),
    Stage("bench (default engine)", "raw/*/*.jsonl", "timed paired runs under bench.engine"),
    Stage("bench (eager pass)", "raw-eager/*/*.jsonl", "the same runs with dynamic caches, no graphs"),
    Stage("summary", "tables/summary.csv", "per variant and temperature (default engine)"),
    Stage("summary (eager pass)", "tables/summary_eager.csv", "the same for the eager pass"),
    Stage("report", "report.md", "the report: tables, phases, figures"),
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
    """The CUDA suite's closing line and exit status (the rule appends it), or why there is none."""
    path = results / "checks" / "pytest_cuda.txt"
    if not path.is_file():
        return ["not finished"]
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
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
    """The paired speedups of the default engine and of the eager pass, side by side in one table."""
    frames = []
    for engine, name in (("default", "summary.csv"), ("eager", "summary_eager.csv")):
        path = results / "tables" / name
        if path.is_file():
            frame = pd.read_csv(path)
            frame.insert(0, "engine", engine)
            frames.append(frame)
    if not frames:
        return "No speedup table: the bench jobs did not finish."
    table = pd.concat(frames, ignore_index=True)
    columns = ["engine", *[c for c in SPEEDUP_COLUMNS if c in table.columns]]
    rows = [[_cell(value) for value in row] for row in table[columns].itertuples(index=False)]
    return markdown_table(columns, rows)


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
        "## Models",
        "",
        training_section(sorted((work / "metrics").glob("*.json"))) or "No model finished training.",
        "",
    ]
    return "\n".join(parts)
