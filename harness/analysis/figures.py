"""Paper-style figures (PDF and PNG) of the views (``harness.analysis.views``), drawn from their tables.

Every figure takes the tables written by ``python -m harness summarize --tables-dir`` (``Inputs``) and nothing
else, so a figure can be redrawn without rerunning a benchmark. Each variant is a labelled row, in the fixed order
of ``plotting.variant_order`` (baselines, the paper's pair, the other methods in catalog order; a method's own
variant before its others), in its method's fixed colour (``plotting.palette``; a method's other variants in shades
of it); a row's bars are its datasets (plain, then hatched: the legend says which). The depth figure is a heat map
with each cell's step count (``harness.analysis.figures_more``).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from harness.analysis.plot_rows import (
    group_legend, group_slots, grouped_hbars, hatch_map, label_rows, mean_rows, row_positions, rows_figure,
    shown_variants, slot_count, stacked_hbars,
)
from harness.analysis.plotting import (
    STYLE, hatch_color, plt, save_figure, temperature_label, variant_colors, variant_order,
)
from harness.analysis.trust import CONTROL_TOLERANCE, CONTROL_VARIANT, control_failures, diverged_variants
from harness.analysis.view import Inputs, read_inputs
from harness.analysis.views import all_views
from harness.catalog import catalog
from harness.errors import DraftcountError

UNTRUSTED = "#b00000"  # the outline and name of a variant whose greedy turns left ar's output


def primary_variants(summary: pd.DataFrame, main: list[str]) -> list[str]:
    """The main variants named after their catalog method, and the A/A control: one per method, each in its
    method's own colour (the speedup figure, the README's main figure)."""
    known = set(catalog())
    named = [v for v in variant_order(summary) if v in main and (v in known or v == CONTROL_VARIANT) and v != "ar"]
    return named or [v for v in variant_order(summary) if v in main and v != "ar"]


def dataset_rows(data: Inputs, variants: list[str], value: str, label: str, low: str | None = None,
                 high: str | None = None, marker: str | None = None, marker_label: str = "",
                 reference: float | None = None, marker_style: str = "D") -> plt.Figure:
    """One panel per temperature, one labelled row per variant, one bar per dataset it ran (hatched by dataset),
    with whiskers ``low``-``high``, a white ``marker_style`` marker at column ``marker`` and the untrusted variants
    outlined in red."""
    summary = data.summary
    table = summary[summary.variant.isin(variants)]
    datasets = sorted(table.dataset.unique())
    slots, hatches = group_slots(table, variants, datasets), hatch_map(datasets)
    temperatures = sorted(summary.temperature.unique())
    figure, axes = rows_figure(slot_count([len(groups) for groups in slots.values()]), len(temperatures), sharex=True)
    colors, diverged = variant_colors(summary), diverged_variants(summary)
    for axis, temperature in zip(axes, temperatures):
        rows = table[table.temperature == temperature]
        drawn = grouped_hbars(axis, rows, slots, value, colors, low=low, high=high, hatches=hatches)
        for (variant, _), (centre, row) in drawn.items():
            if marker and marker in row and pd.notna(row[marker]):
                axis.plot(row[marker], centre, marker_style, markerfacecolor="white", markeredgecolor="black",
                          markersize=3, markeredgewidth=0.7, zorder=4)
            if variant in diverged:
                axis.barh(centre, row[value], 0.9, fill=False, edgecolor=UNTRUSTED, linewidth=1.1, zorder=3)
        if reference is not None:
            axis.axvline(reference, color="black", linewidth=0.7, linestyle=":")
        failing = control_failures(rows)
        if not failing.empty:
            axis.set_title(f"{temperature_label(temperature)}\ncontrol reads "
                           f"{failing.speedup_paired_mean.iloc[0]:.2f}: outside 1 +- {CONTROL_TOLERANCE:.0%}",
                           color=UNTRUSTED)
        else:
            axis.set_title(temperature_label(temperature))
        axis.xaxis.grid(True)
    _, centres = row_positions([len(groups) for groups in slots.values()])
    label_rows(axes[0], variants, centres, [UNTRUSTED if v in diverged else "black" for v in variants])
    figure.supxlabel(label, fontsize=8)
    handles, labels = group_legend(datasets, hatches, "")
    if marker and marker in table and table[marker].notna().any():
        handles.append(plt.Line2D([], [], marker=marker_style, markerfacecolor="white", markeredgecolor="black",
                                  linestyle="none", markersize=3))
        labels.append(marker_label)
    if diverged:
        handles.append(plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor=UNTRUSTED, linewidth=1.1))
        labels.append("left ar's greedy output")
    figure.legend(handles, labels, loc="outside upper center", frameon=False, ncols=min(len(labels), 3))
    return figure


def plot_speedup(data: Inputs) -> plt.Figure:
    """Speedup over ar per dataset, each method's main variant and the A/A control (one row each)."""
    variants = primary_variants(data.summary, data.main)
    return dataset_rows(data, variants, "speedup_paired_mean", "speedup over ar (95% interval)", "speedup_ci_low",
                        "speedup_ci_high", marker="speedup_bound", marker_label="bound (zero host time)",
                        reference=1.0)


def plot_tau(data: Inputs) -> plt.Figure:
    """Tau per dataset, every main variant (one row each); the white dot: accepted draft tokens per step."""
    return dataset_rows(data, shown_variants(data.summary, data.main), "tau", "tau (accepted length per step)",
                        marker="accepted_per_step", marker_label="accepted drafts per step (no bonus)",
                        marker_style="o")


class Part(NamedTuple):
    """One segment of a stacked bar: its column, legend label, colour (None: the variant's own) and hatch."""

    column: str
    label: str
    color: str | None
    hatch: str = ""


PHASES = (Part("phase_prefill_per_token", "prefill", "#c7c7c7"), Part("phase_target_per_token", "target", "#1f77b4"),
          Part("phase_drafter_per_token", "drafter", "#ff7f0e"), Part("phase_verify_per_token", "verify", "#2ca02c"),
          Part("phase_host_per_token", "host", "#d62728", "//"))
WASTE = (Part("drafter_useful_flops_per_token", "drafter, used", None),
         Part("drafter_wasted_flops_per_token", "drafter, wasted", None, "////"),
         Part("verify_useful_flops_per_token", "verifier, used", None),
         Part("verify_wasted_flops_per_token", "verifier, wasted", None, "xxxx"))


def part_colors(parts: tuple[Part, ...], variants: list[str], colors: dict) -> list:
    """Each segment's colour: its own, or each variant's (the verifier's segments, the last two, a paler tint)."""
    found = []
    for index, part in enumerate(parts):
        tint = 0.5 if index >= 2 else 0.0
        found.append(part.color or [tuple(np.array(colors[v]) * (1 - tint) + tint) for v in variants])
    return found


def stacked_rows(data: Inputs, parts: tuple[Part, ...], label: str, scale: float) -> plt.Figure:
    """One panel per temperature, one stacked bar per main variant (mean over datasets)."""
    summary = data.summary
    variants = shown_variants(summary, data.main)
    _, centres = row_positions([1] * len(variants))
    temperatures = sorted(summary.temperature.unique())
    figure, axes = rows_figure(slot_count([1] * len(variants)), len(temperatures), sharex=True)
    colors = part_colors(parts, variants, variant_colors(summary))
    for axis, temperature in zip(axes, temperatures):
        means = mean_rows(summary, variants, [part.column for part in parts], temperature)
        stacked_hbars(axis, centres, [means[part.column].to_numpy() * scale for part in parts], colors,
                      [part.hatch for part in parts], [part.label for part in parts])
        axis.set_title(temperature_label(temperature))
        axis.xaxis.grid(True)
    label_rows(axes[0], variants, centres)
    figure.supxlabel(label, fontsize=8)
    return figure


def legend_patch(color: str, hatch: str) -> plt.Rectangle:
    """A legend entry drawn as the stacked bars draw that segment (hatch white on dark, dark on pale)."""
    patch = plt.Rectangle((0, 0), 1, 1, facecolor=color, hatch=hatch, edgecolor="0.45", linewidth=0.3)
    patch.set_hatchcolor(hatch_color(color))
    return patch


def plot_phases(data: Inputs) -> plt.Figure:
    """Time per emitted token by phase, one stacked bar per main variant (mean over datasets)."""
    figure = stacked_rows(data, PHASES, "ms per emitted token", 1e3)
    handles = [legend_patch(part.color, part.hatch) for part in PHASES]
    figure.legend(handles, [part.label for part in PHASES], loc="outside right upper", frameon=False)
    return figure


def plot_waste(data: Inputs) -> plt.Figure:
    """FLOPs per emitted token, drafter and verifier, used and wasted, one stacked bar per main variant."""
    figure = stacked_rows(data, WASTE, "MFLOPs per emitted token", 1e-6)
    handles = [legend_patch(color, part.hatch) for color, part in zip(("0.35", "0.35", "0.75", "0.75"), WASTE)]
    figure.legend(handles, [part.label for part in WASTE], loc="outside right upper", frameon=False,
                  title="in the variant's colour")
    return figure


def placeholder_figure(message: str) -> plt.Figure:
    """A figure that says why it has nothing to show (drawn when asked for by name without data)."""
    figure, axis = plt.subplots(figsize=(4.6, 2.4))
    axis.text(0.5, 0.5, message, ha="center", va="center")
    axis.set_axis_off()
    return figure


def write_figures(tables_dir: Path, out_dir: Path, main: list[str] | None = None,
                  names: list[str] | None = None) -> list[Path]:
    """Draw the views' figures from the tables ``summarize --tables-dir`` wrote: the named ones (a named figure
    without data says so: the workflow names its figures at plan time), or every one with data. ``main`` lists
    the variants run on every dataset (default: every variant), the others are ablations."""
    data = read_inputs(tables_dir, main)
    figures = {view.name: view for view in all_views() if view.figure}
    unknown = sorted(set(names or []) - set(figures))
    if unknown:
        raise DraftcountError(f"unknown figure {unknown[0]!r}; known: {', '.join(figures)}")
    chosen = [figures[name] for name in names] if names else [view for view in figures.values() if view.with_data(data)]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    with plt.rc_context(STYLE):
        for view in chosen:
            figure = view.draw(data) if view.with_data(data) else placeholder_figure(f"no data for {view.name} here")
            paths += save_figure(figure, out_dir, view.name)
    return paths
