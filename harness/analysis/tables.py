"""Markdown table cells and tables, shared by every report section."""

from __future__ import annotations

from typing import Any

import pandas as pd


def cell(value: Any, template: str) -> str:
    """``value`` formatted by ``template``; a dash for a missing (None or NaN) value."""
    if value is None or isinstance(value, float) and pd.isna(value):
        return "-"
    return template.format(value)


def interval_cell(value: Any, low: Any, high: Any, template: str = "{:.2f}") -> str:
    """``value [low, high]`` (a paired speedup with its 95% interval); the value alone where the interval is
    missing, a dash where the value is."""
    if value is None or isinstance(value, float) and pd.isna(value):
        return "-"
    if any(bound is None or isinstance(bound, float) and pd.isna(bound) for bound in (low, high)):
        return template.format(value)
    return f"{template.format(value)} [{template.format(low)}, {template.format(high)}]"


def metric_cells(row: Any, metrics: list) -> list[str]:
    """``row``'s value of each metric as its report column shows it (divided by its scale, in its format)."""
    return [cell(row[metric.name] / metric.scale if metric.scale != 1 else row[metric.name], metric.fmt)
            for metric in metrics]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table: a header row, its separator, one line per row of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])
