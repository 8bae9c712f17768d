"""Paper-style figures (PDF and PNG) of the views (``harness.analysis.views``), drawn from their tables.

Every figure takes the tables written by ``python -m harness summarize --tables-dir`` (``Inputs``) and nothing
else, so a figure can be redrawn without rerunning a benchmark. One colour per method throughout; several variants
of one method get shades of it.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.ticker
import numpy as np
import pandas as pd

from harness.catalog import catalog
from harness.errors import DraftcountError
from harness.analysis.plotting import (
    EXTRA_COLORS, STYLE, method_colors, plt, save_figure, temperature_label, variant_colors, variant_order,
)
from harness.analysis.view import Inputs, read_inputs
from harness.analysis.views import all_views, budget_families
from harness.analysis.trust import CONTROL_TOLERANCE, CONTROL_VARIANT, control_failures, diverged_variants


def _grouped_bars(axis: plt.Axes, table: pd.DataFrame, value: str, variants: list[str], colors: dict,
                  low: str | None = None, high: str | None = None) -> dict[str, tuple[np.ndarray, pd.DataFrame]]:
    """One group of bars per dataset the variants ran on, one bar per variant; returns each variant's bar positions
    and rows."""
    datasets = sorted(table[table.variant.isin(variants)].dataset.unique())
    width = 0.8 / max(len(variants), 1)
    bars = {}
    for index, variant in enumerate(variants):
        rows = table[table.variant == variant].set_index("dataset").reindex(datasets)
        positions = np.arange(len(datasets)) + (index - (len(variants) - 1) / 2) * width
        bars[variant] = (positions, rows)
        errors = None
        if low and high and low in rows:
            errors = np.vstack([(rows[value] - rows[low]).clip(lower=0), (rows[high] - rows[value]).clip(lower=0)])
            errors = np.nan_to_num(errors)
        axis.bar(positions, rows[value], width, yerr=errors, color=colors[variant], label=variant,
                 error_kw={"elinewidth": 0.6, "capsize": 1.5})
    axis.set_xticks(np.arange(len(datasets)), datasets)
    return bars


def _by_temperature(summary: pd.DataFrame, height: float = 2.4, rows: int = 1, sharey: bool = True):
    temperatures = sorted(summary.temperature.unique())
    figure, axes = plt.subplots(rows, len(temperatures), figsize=(3.3 * len(temperatures), height * rows),
                                squeeze=False, sharey="row" if sharey else False)
    return figure, axes, temperatures


def primary_variants(summary: pd.DataFrame, main: list[str]) -> list[str]:
    """The main variants named after their catalog method, and the A/A control: one per method, each in its
    method's own colour (the speedup figure, the README's main figure)."""
    known = set(catalog())
    named = [v for v in variant_order(summary) if v in main and (v in known or v == CONTROL_VARIANT) and v != "ar"]
    return named or [v for v in variant_order(summary) if v in main and v != "ar"]


def _mark_untrusted(axis: plt.Axes, table: pd.DataFrame, bars: dict) -> None:
    """Hatch the bars of variants whose greedy turns left the paired ar output, and say on the panel when the
    A/A control is outside its tolerance (the report's warning block says why)."""
    diverged = diverged_variants(table)
    for variant, (positions, rows) in bars.items():
        if variant in diverged:
            for patch in axis.patches:
                if patch.get_label() == variant:
                    patch.set_hatch("xxxx")
    failing = control_failures(table)
    if not failing.empty:
        axis.text(0.02, 0.98, f"control reads {failing.speedup_paired_mean.iloc[0]:.2f}: outside 1 +- "
                  f"{CONTROL_TOLERANCE:.0%}", transform=axis.transAxes, color="#b00000", va="top", fontsize=6)


def plot_speedup(data: Inputs) -> plt.Figure:
    summary, main = data.summary, data.main
    colors, variants = variant_colors(summary), primary_variants(summary, main)
    figure, axes, temperatures = _by_temperature(summary)
    for axis, temperature in zip(axes[0], temperatures):
        table = summary[summary.temperature == temperature]
        bars = _grouped_bars(axis, table, "speedup_paired_mean", variants, colors, "speedup_ci_low",
                             "speedup_ci_high")
        if "speedup_bound" in table:
            for index, (positions, rows) in enumerate(bars.values()):
                axis.plot(positions, rows.speedup_bound, "D", markerfacecolor="white", markeredgecolor="black",
                          markersize=3, markeredgewidth=0.8, linestyle="none",
                          label="bound (zero host time)" if index == 0 else None)
        _mark_untrusted(axis, table, bars)
        axis.axhline(1.0, color="black", linewidth=0.7, linestyle=":")
        axis.set_title(temperature_label(temperature))
    axes[0][0].set_ylabel("speedup over ar")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


PHASE_STYLE = (("phase_prefill_per_token", "prefill", "#c7c7c7"), ("phase_target_per_token", "target", "#1f77b4"),
               ("phase_drafter_per_token", "drafter", "#ff7f0e"), ("phase_verify_per_token", "verify", "#2ca02c"),
               ("phase_host_per_token", "host", "#d62728"))


def plot_phases(data: Inputs) -> plt.Figure:
    summary, main = data.summary, data.main
    variants = [v for v in variant_order(summary) if v in main]
    figure, axes, temperatures = _by_temperature(summary, height=2.6)
    for axis, temperature in zip(axes[0], temperatures):
        table = summary[(summary.temperature == temperature) & summary.variant.isin(variants)]
        means = table.groupby("variant")[[column for column, _, _ in PHASE_STYLE]].mean().reindex(
            [v for v in variants if v in set(table.variant)])
        bottom = np.zeros(len(means))
        for column, label, color in PHASE_STYLE:
            values = np.nan_to_num(means[column].to_numpy() * 1e3)
            axis.bar(np.arange(len(means)), values, 0.7, bottom=bottom, color=color, label=label,
                     hatch="//" if label == "host" else None, edgecolor="white", linewidth=0.3)
            bottom += values
        axis.set_xticks(np.arange(len(means)), means.index, rotation=60, ha="right")
        axis.set_title(temperature_label(temperature))
    axes[0][0].set_ylabel("ms per emitted token")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def plot_tau(data: Inputs) -> plt.Figure:
    summary, main = data.summary, data.main
    colors, variants = variant_colors(summary), [v for v in variant_order(summary) if v in main]
    figure, axes, temperatures = _by_temperature(summary)
    for axis, temperature in zip(axes[0], temperatures):
        table = summary[summary.temperature == temperature]
        for positions, rows in _grouped_bars(axis, table, "tau", variants, colors).values():
            axis.plot(positions, rows.accepted_per_step, "o", color="black", markersize=2)
        axis.set_title(temperature_label(temperature))
    axes[0][0].set_ylabel("tau (accepted length per step)")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def plot_waste(data: Inputs) -> plt.Figure:
    summary, main = data.summary, data.main
    colors, variants = variant_colors(summary), [v for v in variant_order(summary) if v in main]
    parts = [("drafter_useful_flops_per_token", "drafter, used", ""),
             ("drafter_wasted_flops_per_token", "drafter, wasted", "////"),
             ("verify_useful_flops_per_token", "verifier, used", ""),
             ("verify_wasted_flops_per_token", "verifier, wasted", "xxxx")]
    figure, axes, temperatures = _by_temperature(summary, height=2.6)
    for axis, temperature in zip(axes[0], temperatures):
        table = summary[summary.temperature == temperature].groupby("variant")[[p for p, _, _ in parts]].mean()
        table = table.reindex([v for v in variants if v in table.index])
        bottom = np.zeros(len(table))
        for index, (column, label, hatch) in enumerate(parts):
            values = table[column].to_numpy() / 1e6
            base = [colors[v] for v in table.index]
            shade = [tuple(0.55 * np.array(c) + 0.45) for c in base] if index >= 2 else base
            axis.bar(np.arange(len(table)), values, 0.7, bottom=bottom, color=shade, hatch=hatch,
                     edgecolor="white", linewidth=0.3, label=label)
            bottom += values
        axis.set_xticks(np.arange(len(table)), table.index, rotation=35, ha="right")
        axis.set_title(temperature_label(temperature))
    axes[0][0].set_ylabel("MFLOPs per emitted token")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c, hatch=h, edgecolor="white")
               for c, h in (("0.35", ""), ("0.35", "////"), ("0.75", ""), ("0.75", "xxxx"))]
    axes[0][-1].legend(handles, [label for _, label, _ in parts], loc="upper left", bbox_to_anchor=(1.0, 1.0),
                       frameon=False)
    return figure


def plot_budget(data: Inputs) -> plt.Figure:
    summary = data.summary
    families = budget_families(summary)
    figure, axes, temperatures = _by_temperature(summary, height=2.2, rows=2, sharey=False)
    for column, temperature in enumerate(temperatures):
        table = summary[summary.temperature == temperature]
        for (method, _), variants in families.items():
            # one dataset that every variant of the family ran on
            common = set.intersection(*(set(table[table.variant == v].dataset) for v in variants))
            if not common:
                continue
            rows = table[table.variant.isin(variants) & (table.dataset == sorted(common)[0])]
            rows = rows.sort_values("verified_per_step")
            color = method_colors().get(method, EXTRA_COLORS[0])
            for row, value in enumerate(("tau", "speedup_paired_mean")):
                axis = axes[row][column]
                axis.plot(rows.verified_per_step, rows[value], "o-", color=color, markersize=3, linewidth=1,
                          label=f"{method} ({sorted(common)[0]})")
                for _, point in rows.iterrows():
                    axis.annotate(point.variant, (point.verified_per_step, point[value]), fontsize=5,
                                  xytext=(2, 2), textcoords="offset points")
        axes[0][column].set_title(temperature_label(temperature))
        axes[1][column].set_xlabel("tokens verified per step")
        axes[1][column].axhline(1.0, color="black", linewidth=0.7, linestyle=":")
    axes[0][0].set_ylabel("tau")
    axes[1][0].set_ylabel("speedup over ar")
    if families:
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def plot_depth(data: Inputs) -> plt.Figure:
    summary, depth, main = data.summary, data.table("depth_acceptance"), data.main
    colors = variant_colors(summary)
    figure, axes, temperatures = _by_temperature(summary)
    variants = [v for v in variant_order(summary) if v in main]
    for axis, temperature in zip(axes[0], temperatures):
        table = depth[depth.temperature == temperature]
        for variant in variants:
            rows = table[table.variant == variant]
            if rows.empty:
                continue
            pooled = rows.groupby("depth")[["reached", "accepted"]].sum()
            rate = pooled.accepted / pooled.reached.where(pooled.reached > 0)
            axis.plot(pooled.index, rate, "o-", color=colors[variant], markersize=3, linewidth=1, label=variant)
        axis.set_ylim(0, 1.02)
        axis.set_xlabel("draft depth d")
        axis.set_title(temperature_label(temperature))
    axes[0][0].set_ylabel("acceptance rate at depth d")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def plot_efficiency(data: Inputs) -> plt.Figure:
    summary, main = data.summary, data.main
    colors = variant_colors(summary)
    figure, axis = plt.subplots(figsize=(4.6, 3.0))
    markers = {temperature: marker for temperature, marker in zip(sorted(summary.temperature.unique()), "os^v")}
    summary = summary[summary.variant.isin(main)]
    for variant in variant_order(summary):
        for temperature, rows in summary[summary.variant == variant].groupby("temperature"):
            axis.scatter(rows.tokens_per_forward, rows.speedup_paired_mean, color=colors[variant], marker=markers[temperature],
                         s=14, label=variant if temperature == min(markers) else None, zorder=3)
    top = max(float(summary.tokens_per_forward.max()), float(summary.speedup_paired_mean.max())) * 1.05
    axis.plot([1, top], [1, top], "--", color="black", linewidth=0.8, label="bound: speedup = tokens per forward")
    axis.set_xlabel("tokens per target forward")
    axis.set_ylabel("speedup over ar")
    for temperature, marker in markers.items():
        axis.scatter([], [], color="0.4", marker=marker, s=14, label=temperature_label(temperature))
    axis.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def placeholder_figure(message: str) -> plt.Figure:
    """A figure that says why it has nothing to show (drawn when asked for by name without data)."""
    figure, axis = plt.subplots(figsize=(4.6, 2.4))
    axis.text(0.5, 0.5, message, ha="center", va="center")
    axis.set_axis_off()
    return figure


def plot_samples(data: Inputs) -> plt.Figure:
    """Tau per sample index, one line per variant x dataset, one panel per temperature."""
    samples, colors = data.table("samples"), variant_colors(data.summary)
    figure, axes, temperatures = _by_temperature(samples)
    for axis, temperature in zip(axes[0], temperatures):
        for (variant, dataset), rows in samples[samples.temperature == temperature].groupby(["variant", "dataset"]):
            rows = rows.sort_values("sample")
            axis.plot(rows["sample"] + 1, rows.tau, marker="o", color=colors.get(variant), label=f"{variant} ({dataset})")
        axis.set_title(temperature_label(temperature))
        axis.set_xlabel("sample index")
        axis.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[0][0].set_ylabel("tau")
    axes[0][-1].legend(fontsize=7)
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
