"""The shapes every per-variant figure is drawn in: panels of labelled rows (one row per variant, its name on the
axis, in ``plotting.variant_order``), each row one or more horizontal bars (a dataset's, a temperature's, a stack of
phases), and heat maps (rows by columns, each cell's value written in it). Rows keep every label readable however
many variants a report holds: the figure grows a fixed height per bar instead of squeezing bars into a fixed width.

Used by ``harness.analysis.figures``, ``categories``, ``families`` and a method's ``view.py``; imports no view.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.colors import Normalize, to_rgb
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from harness.analysis.plotting import edge_color, hatch_color, plt, variant_order

GROUP_HATCHES = ("", "////", "....", "\\\\\\\\", "++", "oo")  # a row's 1st, 2nd, ... bar (a dataset, a temperature)
BAR_INCHES = 0.085  # one bar's slot
GAP = 0.8  # between two rows, in bar slots


def row_positions(counts: Sequence[int], gap: float = GAP) -> tuple[list[np.ndarray], np.ndarray]:
    """Bar centres of rows of ``counts[i]`` bars, top to bottom (y grows downward), and each row's centre."""
    bars, centres, top = [], [], 0.0
    for count in counts:
        centre = np.arange(count, dtype=float) + top
        bars.append(centre)
        centres.append(centre.mean() if count else top)
        top += max(count, 1) + gap
    return bars, np.array(centres)


def rows_figure(slots: float, panels: int, panel_width: float = 2.6, extra: float = 1.0,
                sharex: bool = False) -> tuple[plt.Figure, list[plt.Axes]]:
    """A row of ``panels`` panels sharing their rows, tall enough for ``slots`` bar slots (constrained layout:
    titles, labels and an outside legend never overlap); ``sharex``: one value axis for all (temperatures)."""
    figure, axes = plt.subplots(1, panels, figsize=(panel_width * panels + 1.4, extra + slots * BAR_INCHES),
                                squeeze=False, sharey=True, sharex=sharex, layout="constrained")
    figure.get_layout_engine().set(wspace=0.08)  # room between one panel's last value label and the next's first
    for axis in axes[0]:
        axis.xaxis.set_major_locator(MaxNLocator(nbins=5))
    return figure, list(axes[0])


def label_rows(axis: plt.Axes, labels: Sequence[str], centres: np.ndarray, colors: Sequence | None = None) -> None:
    """Row names on the y axis (top to bottom), optionally coloured (a warning in red)."""
    axis.set_yticks(centres, labels)
    axis.tick_params(axis="y", length=0)
    axis.yaxis.grid(False)
    if len(centres):
        axis.set_ylim(centres.max() + 1.2, centres.min() - 1.2)
    for tick, color in zip(axis.get_yticklabels(), colors or []):
        tick.set_color(color)


def group_slots(table: pd.DataFrame, rows: Sequence[str], groups: Sequence, row: str = "variant",
                group: str = "dataset") -> dict[str, list]:
    """{row: the groups it has in ``table``, in ``groups``' order}: the bars each row gets in every panel."""
    present = table.groupby(row)[group].agg(set).to_dict()
    return {name: [item for item in groups if item in present.get(name, set())] for name in rows}


def grouped_hbars(axis: plt.Axes, table: pd.DataFrame, slots: dict[str, list], value: str, colors: dict,
                  group: str = "dataset", low: str | None = None, high: str | None = None,
                  hatches: dict | None = None) -> dict[tuple[str, object], tuple[float, pd.Series]]:
    """One horizontal bar per row and group (``slots``: {row: its groups}) of ``table``'s ``value``, in the row's
    colour, hatched by group, with ``low``-``high`` whiskers; returns {(row, group): (bar centre, its table row)}."""
    bars, _ = row_positions([len(groups) for groups in slots.values()])
    hatches = hatches or {}
    drawn = {}
    indexed = table.set_index(["variant", group])
    for (name, groups), centres in zip(slots.items(), bars):
        for item, centre in zip(groups, centres):
            if (name, item) not in indexed.index:
                continue
            found = indexed.loc[(name, item)]
            found = found.iloc[0] if isinstance(found, pd.DataFrame) else found
            error = None
            if low and high and pd.notna(found.get(low)) and pd.notna(found.get(high)):
                error = [[max(found[value] - found[low], 0)], [max(found[high] - found[value], 0)]]
            axis.barh(centre, found[value], 0.9, xerr=error, color=colors[name], hatch=hatches.get(item, ""),
                      edgecolor=edge_color(colors[name]), hatchcolor=hatch_color(colors[name]), linewidth=0.4,
                      error_kw={"elinewidth": 0.6, "capsize": 1.2, "ecolor": "0.2"})
            drawn[(name, item)] = (float(centre), found)
    return drawn


def group_legend(groups: Sequence, hatches: dict, title: str) -> tuple[list[Patch], list[str]]:
    """Legend entries of the groups' hatches on grey (the rows' colours are their variants')."""
    handles = [Patch(facecolor="0.8", edgecolor="0.35", hatch=hatches.get(item, ""), linewidth=0.4) for item in groups]
    return handles, [f"{title}{item}" for item in groups]


def hatch_map(groups: Sequence) -> dict:
    """{group: its hatch}, in order."""
    return {item: GROUP_HATCHES[index % len(GROUP_HATCHES)] for index, item in enumerate(groups)}


def stacked_hbars(axis: plt.Axes, centres: np.ndarray, parts: Sequence[np.ndarray], colors: Sequence,
                  hatches: Sequence[str], labels: Sequence[str]) -> None:
    """One stacked horizontal bar per row: ``parts[i]`` the i-th segment of every row (nan: 0), ``colors[i]`` one
    colour or one per row; hatches white on a dark segment, dark on a pale one."""
    left = np.zeros(len(centres))
    for values, color, hatch, label in zip(parts, colors, hatches, labels):
        values = np.nan_to_num(np.asarray(values, dtype=float))
        per_row = list(color) if isinstance(color, list) else [color] * len(centres)
        bars = axis.barh(centres, values, 0.9, left=left, color=per_row, hatch=hatch, edgecolor="0.45",
                         linewidth=0.3, label=label)
        for patch, row_color in zip(bars, per_row):
            patch.set_hatchcolor(hatch_color(row_color))
        left += values


def text_color(rgba: Sequence[float]) -> str:
    """Black on a light cell, white on a dark one."""
    red, green, blue = to_rgb(rgba)
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"


def heatmap(axis: plt.Axes, values: pd.DataFrame, texts: pd.DataFrame, hidden: pd.DataFrame, cmap: str,
            norm: Normalize, fontsize: float = 5.0, weights: pd.DataFrame | None = None):
    """``values`` (rows x columns) as coloured cells, each with its text; ``hidden`` cells blank (light grey) with
    their text in grey; ``weights``: True where the text is bold. Returns the image (for a colour bar)."""
    shown = np.ma.masked_array(values.to_numpy(dtype=float), mask=hidden.to_numpy(dtype=bool) | values.isna())
    colormap = plt.get_cmap(cmap).with_extremes(bad="0.93")
    image = axis.imshow(shown, cmap=colormap, norm=norm, aspect="auto", interpolation="nearest")
    for i, row in enumerate(values.index):
        for j, column in enumerate(values.columns):
            text = texts.at[row, column]
            if not isinstance(text, str) or not text:
                continue
            masked = bool(np.ma.getmaskarray(shown)[i, j])
            color = "0.45" if masked else text_color(colormap(norm(shown[i, j])))
            bold = weights is not None and bool(weights.at[row, column])
            axis.text(j, i, text, ha="center", va="center", fontsize=fontsize, color=color,
                      fontweight="bold" if bold else "normal", linespacing=0.95)
    axis.set_xticks(range(len(values.columns)), [str(column) for column in values.columns])
    axis.set_yticks(range(len(values.index)), list(values.index))
    axis.tick_params(length=0)
    axis.grid(False)
    for spine in axis.spines.values():
        spine.set_visible(False)
    return image


def slot_count(counts: Sequence[int], gap: float = GAP) -> float:
    """The bar slots rows of ``counts[i]`` bars take (for ``rows_figure``)."""
    return float(sum(max(count, 1) for count in counts) + gap * len(counts))


def shown_variants(summary: pd.DataFrame, main: Sequence[str]) -> list[str]:
    """The main variants with rows, in the fixed order (``plotting.variant_order``)."""
    present = set(summary.variant)
    return [variant for variant in variant_order(summary) if variant in main and variant in present]


def mean_rows(summary: pd.DataFrame, variants: Sequence[str], columns: list[str], temperature: float) -> pd.DataFrame:
    """Per variant (in ``variants``' order, every one: nan where it did not run) the mean over datasets."""
    rows = summary[(summary.temperature == temperature) & summary.variant.isin(variants)]
    return rows.groupby("variant")[columns].mean().reindex(list(variants))
