"""When not to trust a report: the A/A control outside its tolerance, a model let through its quality gate
(``allow_weak_models``), a variant whose greedy turns left the target's own text. Each becomes a line of the
warning block at the top of the report and a mark on the speedup figure. Read from the summary table and the
training metrics only (torch-free)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

CONTROL_VARIANT = "ar_control"
CONTROL_TOLERANCE = 0.03  # the A/A control must read 1.00 within +-3%


def control_within(speedup: float | pd.Series) -> bool | pd.Series:
    """Whether the A/A control's paired speedup reads 1.00 within CONTROL_TOLERANCE."""
    return abs(speedup - 1) <= CONTROL_TOLERANCE


def control_failures(summary: pd.DataFrame) -> pd.DataFrame:
    """The control's rows (dataset x temperature) whose paired speedup is outside 1 +- CONTROL_TOLERANCE."""
    rows = summary[summary.variant == CONTROL_VARIANT]
    return rows[~control_within(rows.speedup_paired_mean)]


def diverged_variants(summary: pd.DataFrame) -> dict[str, int]:
    """{variant: greedy turns whose output left the paired ar output}, for variants with any."""
    if "diverged_turns" not in summary:
        return {}
    counts = summary.groupby("variant").diverged_turns.sum(min_count=1).dropna()
    return {variant: int(count) for variant, count in counts.items() if count > 0}


def weak_models(metrics_paths: list[Path]) -> list[str]:
    """The gate failures of models that ``allow_weak_models`` let through (their metrics' ``gate``)."""
    failures = []
    for path in metrics_paths:
        metrics = json.loads(Path(path).read_text())
        failures += (metrics.get("gate") or {}).get("failures", [])
    return failures


def trust_warnings(summary: pd.DataFrame, metrics_paths: list[Path]) -> list[str]:
    """One line per reason not to trust what follows (none: nothing found)."""
    lines = []
    for row in control_failures(summary).itertuples():
        lines.append(f"The A/A control (`ar` against `ar`) reads {row.speedup_paired_mean:.3f} on {row.dataset} at "
                     f"T = {row.temperature:g}, outside 1.00 +- {CONTROL_TOLERANCE:.0%}: the timer or the machine's "
                     f"load moved during the run, and speedups there within {abs(row.speedup_paired_mean - 1):.0%} "
                     "of 1 are noise. Rerun on an idle machine.")
    for failure in weak_models(metrics_paths):
        lines.append(f"A weak model was allowed through its quality gate (allow_weak_models): {failure}. A weak "
                     "target (looping, high perplexity) is trivially draftable and inflates every tau.")
    for variant, count in diverged_variants(summary).items():
        turns = int(summary[(summary.variant == variant) & (summary.temperature == 0)].turns.sum())
        lines.append(f"`{variant}`: {count} of {turns} greedy turns left their paired `ar` output, so its speedup is "
                     "not over the same text (float32: a bug; bf16: near-tie flips, see `tables/divergence`).")
    return lines


def warning_block(lines: list[str]) -> str:
    """The report's warning block: a quoted list, or nothing."""
    if not lines:
        return ""
    return "\n".join(["> **Do not trust these results without reading this.**", ">",
                      *(f"> - {line}" for line in lines)])
