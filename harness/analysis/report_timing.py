"""The report's sections on time: the A/A control, where each variant's time goes, and the cost structure.

Read from the summary table only (``harness.analysis.timing`` computes the columns).
"""

from __future__ import annotations

import pandas as pd

from harness.analysis.metrics import PHASE_REPORT_COLUMNS, report_metrics
from harness.analysis.tables import cell, markdown_table, metric_cells
from harness.analysis.trust import CONTROL_TOLERANCE, CONTROL_VARIANT, control_within


def control_section(summary: pd.DataFrame) -> str:
    """The `ar`-vs-`ar` control's paired speedup per dataset and temperature, and whether it reads 1.00 within
    the tolerance; empty without the control."""
    rows = summary[summary.variant == CONTROL_VARIANT]
    if rows.empty:
        return ""
    cells = []
    for _, row in rows.sort_values(["temperature", "dataset"]).iterrows():
        within = control_within(row.speedup_paired_mean)
        cells.append([row.dataset, f"{row.temperature:g}", str(int(row.turns)), f"{row.speedup_paired_mean:.3f}",
                      f"[{row.speedup_ci_low:.3f}, {row.speedup_ci_high:.3f}]", f"{row.speedup_total:.3f}",
                      "yes" if within else "**no**"])
    return markdown_table(["dataset", "T", "turns", "speedup", "95% interval", "speedup (totals)",
                           f"within +-{CONTROL_TOLERANCE:.0%}"], cells)


def phase_section(summary: pd.DataFrame, main: list[str]) -> str:
    """Per main variant: milliseconds per emitted token by phase, the model and host shares, the measured
    speedup and the bound."""
    columns = report_metrics(PHASE_REPORT_COLUMNS)
    rows = summary[summary.variant.isin(main)].sort_values(["temperature", "dataset", "variant"])
    if rows.phase_host_per_token.isna().all():
        return ""
    cells = [[row.variant, row.dataset, f"{row.temperature:g}"]
             + metric_cells(row, columns)
             for _, row in rows.iterrows()]
    return markdown_table(["variant", "dataset", "T"] + [metric.label for metric in columns], cells)


def cost_section(summary: pd.DataFrame) -> str:
    """Per dataset and temperature: the target's 1-token forward (`ar`), each tree variant's verify forward
    (tokens, milliseconds, ratio to the 1-token forward) and drafter step (milliseconds, and how many of them
    one target forward costs)."""
    ar = summary[summary.variant == "ar"].set_index(["dataset", "temperature"]).target_seconds_per_forward
    rows = []
    for _, row in summary.sort_values(["temperature", "dataset", "variant"]).iterrows():
        one = ar.get((row.dataset, row.temperature), float("nan"))
        if row.variant == "ar" or pd.isna(one) or pd.isna(row.target_seconds_per_forward):
            continue
        drafter = row.drafter_seconds_per_forward
        rows.append([row.variant, row.dataset, f"{row.temperature:g}", f"{1e3 * one:.2f}",
                     f"{row.verified_per_step:.1f}", f"{1e3 * row.target_seconds_per_forward:.2f}",
                     f"{row.target_seconds_per_forward / one:.2f}", cell(1e3 * drafter, "{:.2f}"),
                     cell(one / drafter if drafter else float("nan"), "{:.1f}")])
    if not rows:
        return ""
    return markdown_table(["variant", "dataset", "T", "target 1-token ms", "tokens verified/step", "verify ms",
                           "verify / 1 token", "drafter step ms", "target / drafter step"], rows)
