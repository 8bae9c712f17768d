"""The views' figures that are not a bar per variant: acceptance by depth (a heat map, each cell with its step count),
speedup against tokens per forward (efficiency), the budget sweeps and the samples' lines. Drawn from the tables of
``python -m harness summarize --tables-dir`` only, as ``harness.analysis.figures``.
"""

from __future__ import annotations

import textwrap

import matplotlib.ticker
import numpy as np
import pandas as pd
from matplotlib.colors import Normalize

from harness.analysis.plot_rows import heatmap, label_rows, row_positions, rows_figure, shown_variants, slot_count
from harness.analysis.plotting import figure_legend, palette, plt, temperature_label, variant_colors, variant_styles
from harness.analysis.view import Inputs
from harness.analysis.views import budget_families

MIN_STEPS = 20  # a depth's rate from fewer verification steps than this is not shown (its count is)
DATASET_MARKERS = ("o", "s", "^", "D", "v", "P")


def depth_cells(depth: pd.DataFrame, variants: list[str], temperature: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pooled over datasets, per variant (rows, in ``variants``' order, those with rows) and depth (columns): the
    acceptance rate and its step count, the verification steps that reached depth d - 1 (column ``reached`` of the
    depth table; all nan when the table has none: the rate alone, ``rate``, averaged over datasets)."""
    table = depth[(depth.temperature == temperature) & depth.variant.isin(variants)]
    order = [variant for variant in variants if variant in set(table.variant)]
    if "reached" in table:
        pooled = table.groupby(["variant", "depth"])[["reached", "accepted"]].sum()
        rates = (pooled.accepted / pooled.reached.where(pooled.reached > 0)).unstack("depth")
        counts = pooled.reached.unstack("depth")
    else:
        rates = table.groupby(["variant", "depth"]).rate.mean().unstack("depth")
        counts = rates * np.nan
    return rates.reindex(order), counts.reindex(order)


def shown_depths(counts: list[pd.DataFrame], rates: list[pd.DataFrame]) -> tuple[list[int], int]:
    """The depths to show (1 up to the deepest with a rate of at least MIN_STEPS steps somewhere; every depth when
    the table has no counts) and the deepest depth in the table."""
    deepest = max((int(max(frame.columns)) for frame in rates if len(frame.columns)), default=0)
    known = [frame for frame in counts if frame.notna().to_numpy().any()]
    if not known:
        return list(range(1, deepest + 1)), deepest
    enough = [int(depth) for frame in known for depth in frame.columns if (frame[depth] >= MIN_STEPS).any()]
    return list(range(1, max(enough, default=1) + 1)), deepest


def depth_texts(rates: pd.DataFrame, counts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each cell's text (the rate over its step count; a count alone where it is under MIN_STEPS) and whether the
    cell is hidden (under MIN_STEPS steps, or no rate)."""
    hidden = rates.isna() | (counts < MIN_STEPS)
    texts = pd.DataFrame("", index=rates.index, columns=rates.columns, dtype=object)
    for row in rates.index:
        for column in rates.columns:
            rate, count = rates.at[row, column], counts.at[row, column]
            if pd.isna(count):
                texts.at[row, column] = "" if pd.isna(rate) else f"{rate:.2f}"
            elif hidden.at[row, column]:
                texts.at[row, column] = f"n={int(count)}"
            else:
                texts.at[row, column] = f"{rate:.2f}\n{int(count)}"
    return texts, hidden


def plot_depth(data: Inputs) -> plt.Figure:
    """Acceptance rate at depth d, one row per main variant, one heat map per temperature; each cell: the rate
    (pooled over datasets) and below it the verification steps it is measured on; a cell of fewer than MIN_STEPS
    steps shows its count only (grey), and depths no variant reached MIN_STEPS times are left out."""
    summary, depth = data.summary, data.table("depth_acceptance")
    variants = shown_variants(summary, data.main)
    temperatures = sorted(summary.temperature.unique())
    cells = [depth_cells(depth, variants, temperature) for temperature in temperatures]
    depths, deepest = shown_depths([counts for _, counts in cells], [rates for rates, _ in cells])
    rows = [variant for variant in variants if any(variant in rates.index for rates, _ in cells)]
    figure, axes = plt.subplots(1, len(temperatures), squeeze=False, layout="constrained", sharey=True,
                                figsize=(0.4 * len(depths) * len(temperatures) + 2.4, 0.9 + 0.22 * len(rows)))
    norm, image = Normalize(0, 1), None
    for axis, temperature, (rates, counts) in zip(axes[0], temperatures, cells):
        rates, counts = rates.reindex(index=rows, columns=depths), counts.reindex(index=rows, columns=depths)
        texts, hidden = depth_texts(rates, counts)
        image = heatmap(axis, rates, texts, hidden, "viridis", norm, fontsize=5.2)
        axis.set_xlabel("draft depth d")
        axis.set_title(temperature_label(temperature))
    no_counts = all(counts.isna().to_numpy().all() for _, counts in cells)
    note = ("this table holds no step counts (no column `reached`): rates shown unfiltered" if no_counts else
            f"each cell: rate, and below it the steps that reached depth d - 1; grey: under {MIN_STEPS} steps")
    if deepest > max(depths, default=0):
        skipped = f"depth {deepest}" if deepest == max(depths) + 1 else f"depths {max(depths) + 1}-{deepest}"
        note += f"; {skipped}: under {MIN_STEPS} steps everywhere"
    figure.suptitle(textwrap.fill(note, int(figure.get_figwidth() * 15)), fontsize=6)
    if image is not None:
        figure.colorbar(image, ax=list(axes[0]), shrink=min(1.0, 4 / max(len(rows), 1) + 0.3),
                        label="acceptance rate")
    return figure


def bound_column(summary: pd.DataFrame) -> str:
    """The speedup's bound: tokens per target forward; in a summary older than that column, its ``tau`` (then new
    tokens per target forward, the bonus token included)."""
    return "tokens_per_forward" if "tokens_per_forward" in summary else "tau"


def plot_efficiency(data: Inputs) -> plt.Figure:
    """Speedup against its bound, tokens per target forward: one row per main variant, one panel per temperature;
    per dataset a filled marker (the speedup) joined to a hollow one (tokens per forward), the gap the overhead."""
    summary = data.summary
    bound = bound_column(summary)
    variants = shown_variants(summary, data.main)
    datasets = sorted(summary[summary.variant.isin(variants)].dataset.unique())
    _, centres = row_positions([1] * len(variants), gap=0.6)
    offsets = {dataset: 0.6 * (index - (len(datasets) - 1) / 2) / max(len(datasets), 1)
               for index, dataset in enumerate(datasets)}
    temperatures = sorted(summary.temperature.unique())
    figure, axes = rows_figure(slot_count([2] * len(variants), gap=0.0) * 0.8, len(temperatures))
    colors = variant_colors(summary)
    for axis, temperature in zip(axes, temperatures):
        rows = summary[(summary.temperature == temperature) & summary.variant.isin(variants)]
        for row in rows.itertuples():
            y = centres[variants.index(row.variant)] + offsets[row.dataset]
            marker = DATASET_MARKERS[datasets.index(row.dataset) % len(DATASET_MARKERS)]
            axis.plot([row.speedup_paired_mean, getattr(row, bound)], [y, y], color="0.6", linewidth=0.6)
            axis.plot(getattr(row, bound), y, marker, markerfacecolor="white", markeredgecolor=colors[row.variant],
                      markersize=3.2, markeredgewidth=0.8)
            axis.plot(row.speedup_paired_mean, y, marker, color=colors[row.variant], markersize=3.2)
        axis.axvline(1.0, color="black", linewidth=0.7, linestyle=":")
        axis.set_title(temperature_label(temperature))
        axis.xaxis.grid(True)
    label_rows(axes[0], variants, centres)
    figure.supxlabel("speedup over ar (filled) and its bound, "
                     + ("tokens per target forward (hollow)" if bound != "tau" else "tau (hollow)"), fontsize=8)
    handles = [plt.Line2D([], [], marker=DATASET_MARKERS[i % len(DATASET_MARKERS)], color="0.35", linestyle="none",
                          markersize=3.2) for i in range(len(datasets))]
    figure.legend(handles, datasets, loc="outside right upper", frameon=False, title="dataset")
    return figure


def point_label(variant: str, method: str) -> str:
    """A budget point's label: the variant's name past its method's (``lyanna_b24`` -> ``b24``); the method's own
    variant: ``default``."""
    if variant == method:
        return "default"
    return variant.removeprefix(f"{method}_") or variant


def plot_budget(data: Inputs) -> plt.Figure:
    """Tau (top) and speedup (bottom) against the tokens verified per step, one line per family of budget variants
    on one dataset every variant of the family ran, each point labelled with its variant."""
    summary = data.summary
    families = budget_families(summary)
    colors = palette(method for method, _ in families)
    temperatures = sorted(summary.temperature.unique())
    figure, axes = plt.subplots(2, len(temperatures), figsize=(3.4 * len(temperatures) + 1.4, 4.6), squeeze=False,
                                layout="constrained")
    for column, temperature in enumerate(temperatures):
        table = summary[summary.temperature == temperature]
        for index, ((method, _), variants) in enumerate(families.items()):
            common = set.intersection(*(set(table[table.variant == v].dataset) for v in variants))
            if not common:
                continue
            dataset = sorted(common)[0]
            rows = table[table.variant.isin(variants) & (table.dataset == dataset)].sort_values("verified_per_step")
            for row_index, value in enumerate(("tau", "speedup_paired_mean")):
                axis = axes[row_index][column]
                axis.plot(rows.verified_per_step, rows[value], marker="os^D"[index % 4], color=colors[method],
                          markersize=3, linewidth=1, label=f"{method} ({dataset})")
                for point, (_, found) in enumerate(rows.iterrows()):
                    axis.annotate(point_label(found.variant, method), (found.verified_per_step, found[value]),
                                  fontsize=5, xytext=(3, 4 if point % 2 == 0 else -8), textcoords="offset points",
                                  color=colors[method])
        axes[0][column].set_title(temperature_label(temperature))
        axes[1][column].set_xlabel("tokens verified per step")
        axes[1][column].axhline(1.0, color="black", linewidth=0.7, linestyle=":")
        for axis in axes[:, column]:
            axis.margins(x=0.12, y=0.15)
    axes[0][0].set_ylabel("tau")
    axes[1][0].set_ylabel("speedup over ar")
    if families:
        figure_legend(figure, axes[0])
    return figure


def plot_samples(data: Inputs) -> plt.Figure:
    """Tau per sample index, one line per variant x dataset, one panel per temperature."""
    samples, styles = data.table("samples"), variant_styles(data.summary)
    temperatures = sorted(samples.temperature.unique())
    figure, axes = plt.subplots(1, len(temperatures), figsize=(3.3 * len(temperatures) + 1.4, 2.4), squeeze=False,
                                sharey=True, layout="constrained")
    datasets = sorted(samples.dataset.unique())
    for axis, temperature in zip(axes[0], temperatures):
        for (variant, dataset), rows in samples[samples.temperature == temperature].groupby(["variant", "dataset"]):
            rows = rows.sort_values("sample")
            style = styles.get(variant)
            axis.plot(rows["sample"] + 1, rows.tau, marker=DATASET_MARKERS[datasets.index(dataset) % 6],
                      color=style.color if style else None, linestyle=style.linestyle if style else "-",
                      markersize=3.5, label=f"{variant} ({dataset})")
        axis.set_title(temperature_label(temperature))
        axis.set_xlabel("sample index")
        axis.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[0][0].set_ylabel("tau")
    figure_legend(figure, axes[0])
    return figure
