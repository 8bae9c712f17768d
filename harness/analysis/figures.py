"""Paper-style figures (PDF and PNG) from the summary and per-depth acceptance tables.

Every figure takes the tables written by ``python -m harness summarize`` and
nothing else, so a figure can be redrawn without rerunning a benchmark. One
colour per method throughout; several variants of one method get shades of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from harness.store.atomic import atomic_path  # noqa: E402
from harness.catalog import catalog  # noqa: E402
from harness.errors import DraftcountError  # noqa: E402
from harness.analysis.categories import plot_categories  # noqa: E402
from harness.analysis.context_length import plot_context_length  # noqa: E402
from harness.analysis.trust import CONTROL_TOLERANCE, CONTROL_VARIANT, control_failures, diverged_variants  # noqa: E402

EXTRA_COLORS = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
SIZE_OPTIONS = {"budget", "tree_budget", "gamma", "branching", "tree_file", "depth", "top_k"}
STYLE = {
    "font.family": "serif", "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "axes.spines.top": False, "axes.spines.right": False,
    "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5, "savefig.dpi": 150, "figure.dpi": 100,
}


def method_colors() -> dict[str, str]:
    """Each catalog method's colour (its catalog entry's), in catalog order; methods without one get none."""
    return {name: item.color for name, item in catalog().items() if item.color}


def variant_colors(summary: pd.DataFrame) -> dict[str, tuple[float, float, float]]:
    """A fixed colour per variant: its method's colour, lightened for each further variant of the method."""
    colors = {}
    extras = iter(EXTRA_COLORS * 4)
    for method, group in summary.groupby("method", sort=False):
        base = np.array(to_rgb(method_colors().get(method) or next(extras)))
        variants = sorted(group.variant.unique(), key=lambda name: (name != method, name))
        for index, variant in enumerate(variants):
            shade = min(0.7, 0.6 * index / max(len(variants) - 1, 1))
            colors[variant] = tuple(base + (1 - base) * shade)
    return colors


def variant_order(summary: pd.DataFrame) -> list[str]:
    known = list(catalog())
    methods = known + sorted(set(summary.method) - set(known))
    pairs = summary[["method", "variant"]].drop_duplicates()
    return [variant for _, variant in sorted(
        zip(pairs.method, pairs.variant), key=lambda pair: (methods.index(pair[0]), pair[1] != pair[0], pair[1]))]


def _temperature_label(temperature: float) -> str:
    return "greedy (T = 0)" if temperature == 0 else f"T = {temperature:g}"


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


def plot_speedup(summary: pd.DataFrame, depth: pd.DataFrame, main: list[str]) -> plt.Figure:
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
        axis.set_title(_temperature_label(temperature))
    axes[0][0].set_ylabel("speedup over ar")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


PHASE_STYLE = (("phase_prefill_per_token", "prefill", "#c7c7c7"), ("phase_target_per_token", "target", "#1f77b4"),
               ("phase_drafter_per_token", "drafter", "#ff7f0e"), ("phase_verify_per_token", "verify", "#2ca02c"),
               ("phase_host_per_token", "host", "#d62728"))


def plot_phases(summary: pd.DataFrame, depth: pd.DataFrame, main: list[str]) -> plt.Figure:
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
        axis.set_title(_temperature_label(temperature))
    axes[0][0].set_ylabel("ms per emitted token")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def plot_tau(summary: pd.DataFrame, depth: pd.DataFrame, main: list[str]) -> plt.Figure:
    colors, variants = variant_colors(summary), [v for v in variant_order(summary) if v in main]
    figure, axes, temperatures = _by_temperature(summary)
    for axis, temperature in zip(axes[0], temperatures):
        table = summary[summary.temperature == temperature]
        for positions, rows in _grouped_bars(axis, table, "tau", variants, colors).values():
            axis.plot(positions, rows.accepted_per_step, "o", color="black", markersize=2)
        axis.set_title(_temperature_label(temperature))
    axes[0][0].set_ylabel("tau (accepted length per step)")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def plot_waste(summary: pd.DataFrame, depth: pd.DataFrame, main: list[str]) -> plt.Figure:
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
        axis.set_title(_temperature_label(temperature))
    axes[0][0].set_ylabel("MFLOPs per emitted token")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c, hatch=h, edgecolor="white")
               for c, h in (("0.35", ""), ("0.35", "////"), ("0.75", ""), ("0.75", "xxxx"))]
    axes[0][-1].legend(handles, [label for _, label, _ in parts], loc="upper left", bbox_to_anchor=(1.0, 1.0),
                       frameon=False)
    return figure


def budget_families(summary: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    """Variants of one method and verifier whose options differ only in draft size (budget, gamma, tree shape)."""
    families: dict[tuple[str, str], list[str]] = {}
    sizes: dict[tuple[str, str], set[str]] = {}
    verifiers = summary.verifier if "verifier" in summary else pd.Series("token_level", index=summary.index)
    table = summary.assign(verifier=verifiers)
    for (method, verifier, variant), options in table.groupby(["method", "verifier", "variant"]).options.first().items():
        parsed = json.loads(options or "{}")
        others = {k: v for k, v in parsed.items() if k not in SIZE_OPTIONS}
        key = (method, verifier + json.dumps(others, sort_keys=True))
        families.setdefault(key, []).append(variant)
        sizes.setdefault(key, set()).add(json.dumps({k: v for k, v in parsed.items() if k in SIZE_OPTIONS},
                                                    sort_keys=True))
    # a family is several variants whose sizes differ (ar beside ar_control, the same options twice, is none)
    return {key: variants for key, variants in families.items() if len(variants) > 1 and len(sizes[key]) > 1}


def plot_budget(summary: pd.DataFrame, depth: pd.DataFrame, main: list[str]) -> plt.Figure:
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
        axes[0][column].set_title(_temperature_label(temperature))
        axes[1][column].set_xlabel("tokens verified per step")
        axes[1][column].axhline(1.0, color="black", linewidth=0.7, linestyle=":")
    axes[0][0].set_ylabel("tau")
    axes[1][0].set_ylabel("speedup over ar")
    if families:
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def plot_depth(summary: pd.DataFrame, depth: pd.DataFrame, main: list[str]) -> plt.Figure:
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
        axis.set_title(_temperature_label(temperature))
    axes[0][0].set_ylabel("acceptance rate at depth d")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def plot_ablation(summary: pd.DataFrame, depth: pd.DataFrame, main: list[str]) -> plt.Figure:
    table = summary[summary.method == "lyanna"]
    ablation_datasets = set(table[~table.variant.isin(main)].dataset)
    table = table[table.dataset.isin(ablation_datasets)] if ablation_datasets else table
    colors = variant_colors(summary)
    variants = [v for v in variant_order(summary) if v in set(table.variant)]
    values = [("tau", "tau"), ("speedup_paired_mean", "speedup over ar"), ("drafter_flop_waste", "drafter-FLOP waste")]
    temperatures = sorted(summary.temperature.unique())
    figure, axes = plt.subplots(1, len(values), figsize=(2.6 * len(values) + 1.2, 2.6), squeeze=False)
    width = 0.8 / max(len(temperatures), 1)
    for axis, (column, label) in zip(axes[0], values):
        for index, temperature in enumerate(temperatures):
            rows = table[table.temperature == temperature].groupby("variant")[column].mean().reindex(variants)
            positions = np.arange(len(variants)) + (index - (len(temperatures) - 1) / 2) * width
            axis.bar(positions, rows, width, color=[colors[v] for v in variants], hatch="" if index == 0 else "///",
                     edgecolor="white", linewidth=0.3)
        axis.set_xticks(np.arange(len(variants)), variants, rotation=40, ha="right")
        axis.set_title(label)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor="0.6", hatch="" if i == 0 else "///", edgecolor="white")
               for i in range(len(temperatures))]
    axes[0][-1].legend(handles, [_temperature_label(t) for t in temperatures], loc="upper left",
                       bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def plot_efficiency(summary: pd.DataFrame, depth: pd.DataFrame, main: list[str]) -> plt.Figure:
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
        axis.scatter([], [], color="0.4", marker=marker, s=14, label=_temperature_label(temperature))
    axis.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


PLOTTERS: dict[str, Callable[[pd.DataFrame, pd.DataFrame, list[str]], plt.Figure]] = {
    "speedup": plot_speedup, "phases": plot_phases, "tau": plot_tau, "waste": plot_waste, "budget": plot_budget, "depth": plot_depth,
    "ablation": plot_ablation, "efficiency": plot_efficiency,
}


def plot_samples(samples: pd.DataFrame, colors: dict) -> plt.Figure:
    """Tau per sample index, one line per variant x dataset, one panel per temperature."""
    if samples.empty:
        figure, axis = plt.subplots(figsize=(4.6, 2.4))
        axis.text(0.5, 0.5, "no variant ran several samples per prompt", ha="center", va="center")
        axis.set_axis_off()
        return figure
    figure, axes, temperatures = _by_temperature(samples)
    for axis, temperature in zip(axes[0], temperatures):
        for (variant, dataset), rows in samples[samples.temperature == temperature].groupby(["variant", "dataset"]):
            rows = rows.sort_values("sample")
            axis.plot(rows["sample"] + 1, rows.tau, marker="o", color=colors.get(variant), label=f"{variant} ({dataset})")
        axis.set_title(_temperature_label(temperature))
        axis.set_xlabel("sample index")
        axis.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[0][0].set_ylabel("tau")
    axes[0][-1].legend(fontsize=7)
    return figure


def save_figure(figure: plt.Figure, out_dir: Path, name: str) -> list[Path]:
    """Write ``name``.pdf and ``name``.png atomically (a killed run leaves no half-written figure)."""
    paths = []
    for suffix in ("pdf", "png"):
        path = out_dir / f"{name}.{suffix}"
        with atomic_path(path) as partial:
            figure.savefig(partial, format=suffix, bbox_inches="tight")
        paths.append(path)
    plt.close(figure)
    return paths


def write_figures(summary_csv: Path, depth_csv: Path, out_dir: Path, main: list[str] | None = None,
                  names: list[str] | None = None, samples_csv: Path | None = None,
                  categories_csv: Path | None = None, context_csv: Path | None = None) -> list[Path]:
    """Draw the named figures (default: all) from the tables; ``main`` lists the variants run on every
    dataset (default: every variant), the others are ablations. Figure ``samples`` is drawn when the
    per-sample-index table ``samples_csv`` is given, figure ``categories`` when the per-category table is, figure
    ``context_length`` when the by-context-length table is."""
    summary = pd.read_csv(summary_csv, keep_default_na=False, na_values=[""])
    depth = pd.read_csv(depth_csv)
    if summary.empty:
        raise DraftcountError(f"{summary_csv} holds no rows to plot")
    unknown = sorted(set(names or []) - set(PLOTTERS) - {"samples", "categories", "context_length"})
    if unknown:
        raise DraftcountError(f"unknown figure {unknown[0]!r}; known: {sorted(PLOTTERS)}")
    main = main or sorted(summary.variant.unique())
    missing = sorted(set(main) - set(summary.variant))
    if missing:
        raise DraftcountError(f"variant {missing[0]!r} has no rows in {summary_csv}")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    with plt.rc_context(STYLE):
        for name in names or list(PLOTTERS):
            if name in PLOTTERS:
                paths += save_figure(PLOTTERS[name](summary, depth, main), out_dir, name)
        if samples_csv is not None and (not names or "samples" in names):
            paths += save_figure(plot_samples(pd.read_csv(samples_csv), variant_colors(summary)), out_dir, "samples")
        if categories_csv is not None and (not names or "categories" in names):
            paths += save_figure(plot_categories(pd.read_csv(categories_csv), main, variant_colors(summary)), out_dir,
                                 "categories")
        if context_csv is not None and (not names or "context_length" in names):
            paths += save_figure(plot_context_length(pd.read_csv(context_csv), main, variant_colors(summary)),
                                 out_dir, "context_length")
    return paths
