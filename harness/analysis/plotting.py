"""What every figure shares: matplotlib on its file backend (Agg), the paper style, the palette, the variants' order,
the number formats of log axes, the temperature labels and the atomic writer.

The palette. Each method has one fixed colour in every figure: its catalog entry's (``methods/__init__.py``); the
paper's pair (``lyanna``, ``eagle``) and the baselines (``ar``, ``sd``, ``tree_sd``) hold the five strongest
(``FIXED_COLORS``, Okabe-Ito's colour-blind-safe black, blue, vermillion, bluish green and reddish purple), the other
methods distinct hues far from them and from each other (at least ``MIN_COLOR_DISTANCE`` apart in CIELAB); a method
without a catalog colour (a plug-in's, a hybrid target's) gets the first of ``SPARE_COLORS`` that no method shown
holds. A method's further variants (``eagle_b24``, ``lyanna_regen``, the A/A control ``ar_control``) keep its hue at
another lightness (``shade``), and in line and scatter figures a marker and a line style of their own
(``variant_styles``), so two variants of one method never look alike.

The order. Every figure lists its variants in one fixed order (``variant_order``), the same in every figure so a
reader can find a variant where it was before: the baselines first (``ar``, its A/A control, ``sd``, ``tree_sd``),
then the paper's pair (``eagle``, ``lyanna``), then the other methods in catalog order; each method's variant named
after it first, its other variants after it by name. Variants are labelled rows (names on the axis, never colour
alone), so no label overlaps however many variants a report has (``harness.analysis.plot_rows``).

The views' figure functions (``harness.analysis.figures``, ``categories``, ``context_length``, ``families``, a
method's ``view.py``) import these when they draw, so this module imports no view: the views import nothing that
imports them back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_hex, to_rgb  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter  # noqa: E402

from harness.catalog import catalog  # noqa: E402
from harness.store.atomic import atomic_path  # noqa: E402

FIXED_COLORS = {"ar": "#000000", "sd": "#009e73", "tree_sd": "#cc79a7", "eagle": "#0072b2", "lyanna": "#d55e00"}
SPARE_COLORS = ("#3cb44b", "#469990", "#aa6e28", "#808080", "#ffd8b1", "#a9a9a9", "#e6beff", "#fffac8")
MIN_COLOR_DISTANCE = 25.0  # CIE76 distance in CIELAB: two method colours at least this far apart
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
LINESTYLES = ("-", "--", "-.", ":")
SHADES = (0.0, 0.5, -0.4, 0.78, -0.65, 0.25)  # + toward white, - toward black: a method's 1st, 2nd, ... variant
LIGHTER = (0.0, 0.3, 0.5, 0.65, 0.78, 0.88)  # a dark colour's variants: only toward white
DARKER = (0.0, -0.25, -0.42, -0.56, -0.68, -0.78)  # a light colour's variants: only toward black
STYLE = {
    "font.family": "serif", "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "legend.fontsize": 7,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "axes.spines.top": False, "axes.spines.right": False,
    "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5, "savefig.dpi": 150, "figure.dpi": 100,
    "axes.axisbelow": True,
}


class VariantStyle(NamedTuple):
    """How one variant is drawn: its colour, and in line and scatter figures its marker and line style."""

    color: tuple[float, float, float]
    marker: str
    linestyle: str


def lab(color: str | Sequence[float]) -> np.ndarray:
    """The colour in CIELAB (D65): lightness 0-100 and the two opponent axes."""
    rgb = np.array(to_rgb(color))
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def color_distance(first: str | Sequence[float], second: str | Sequence[float]) -> float:
    """How far apart two colours look (CIE76: Euclidean distance in CIELAB; about 2.3 is just noticeable)."""
    return float(np.linalg.norm(lab(first) - lab(second)))


def method_colors() -> dict[str, str]:
    """Each catalog method's colour (its catalog entry's), in catalog order; methods without one get none."""
    return {name: item.color for name, item in catalog().items() if item.color}


def palette(methods: Iterable[str]) -> dict[str, str]:
    """A fixed colour per method: its catalog colour, else the first spare colour no other method here holds."""
    known = method_colors()
    chosen = {method: known[method] for method in dict.fromkeys(methods) if method in known}
    spares = (color for color in SPARE_COLORS + tuple(plt.get_cmap("tab20").colors)
              if to_hex(color) not in {to_hex(c) for c in chosen.values()})
    for method in dict.fromkeys(methods):
        if method not in chosen:
            chosen[method] = to_hex(next(spares))
    return chosen


def shade(color: str | Sequence[float], rank: int) -> tuple[float, float, float]:
    """A method's ``rank``-th variant's colour (0: the method's own): its hue lighter or darker, a dark colour only
    lighter and a light one only darker, so every rank stays visible on white and apart from the others (six
    shades, then they repeat: markers and line styles tell those apart)."""
    base = np.array(to_rgb(color))
    lightness = lab(color)[0]
    steps = LIGHTER if lightness < 35 else DARKER if lightness > 78 else SHADES
    amount = steps[rank % len(steps)]
    target = np.ones(3) if amount > 0 else np.zeros(3)
    return tuple(float(v) for v in base + (target - base) * abs(amount))


def method_variants(summary: pd.DataFrame) -> dict[str, list[str]]:
    """{method: its variants}, the variant named after the method first, the others by name."""
    pairs = summary[["method", "variant"]].drop_duplicates()
    return {method: sorted(group.variant.unique(), key=lambda name: (name != method, name))
            for method, group in pairs.groupby("method", sort=False)}


def variant_styles(summary: pd.DataFrame) -> dict[str, VariantStyle]:
    """Each variant's colour (its method's, shaded by rank), marker and line style (by rank)."""
    families = method_variants(summary)
    colors = palette(families)
    styles = {}
    for method, variants in families.items():
        for rank, variant in enumerate(variants):
            styles[variant] = VariantStyle(shade(colors[method], rank), MARKERS[rank % len(MARKERS)],
                                           LINESTYLES[(rank // 2) % len(LINESTYLES)])
    return styles


def variant_colors(summary: pd.DataFrame) -> dict[str, tuple[float, float, float]]:
    """A fixed colour per variant: its method's, shaded for each further variant of the method."""
    return {variant: style.color for variant, style in variant_styles(summary).items()}


def variant_order(summary: pd.DataFrame) -> list[str]:
    """The fixed order of every figure (see the module's docstring): catalog order of the methods (baselines, the
    paper's pair, the rest), unknown methods after them by name; within a method its own-named variant first."""
    known = list(catalog())
    methods = known + sorted(set(summary.method) - set(known))
    pairs = summary[["method", "variant"]].drop_duplicates()
    return [variant for _, variant in sorted(
        zip(pairs.method, pairs.variant), key=lambda pair: (methods.index(pair[0]), pair[1] != pair[0], pair[1]))]


def edge_color(color: str | Sequence[float]) -> tuple[float, float, float]:
    """A darker outline of a bar's colour: a pale bar stays visible on white."""
    return tuple(float(v) * 0.55 for v in to_rgb(color))


def figure_legend(figure: plt.Figure, axes: Iterable[plt.Axes], **options) -> None:
    """One legend for the whole figure, outside its panels on the right: every labelled artist of ``axes`` once."""
    found: dict[str, object] = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels()):
            found.setdefault(label, handle)
    if found:
        figure.legend(list(found.values()), list(found), loc="outside right upper", frameon=False, **options)


def hatch_color(color: str | Sequence[float]) -> tuple[float, float, float]:
    """The hatch lines on a bar of ``color``: white on a dark bar, its darker outline on a light one."""
    return (1.0, 1.0, 1.0) if lab(color)[0] < 45 else edge_color(color)


def temperature_label(temperature: float) -> str:
    return "greedy (T = 0)" if temperature == 0 else f"T = {temperature:g}"


def compact_number(value: float) -> str:
    """A tick label for a count: 51200 -> 51k, 409600 -> 410k, 1.2e6 -> 1.2M, 8 -> 8."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:.3g}{suffix}" if scaled < 100 else f"{scaled:.0f}{suffix}"
    return f"{value:g}"


NICE = ((1.0, 1.5, 2.0, 3.0, 5.0, 7.0), (1.0, 2.0, 5.0), (1.0, 3.0), (1.0,))  # round values per decade, finest first


def round_values(low: float, high: float, steps: Sequence[float]) -> list[float]:
    """The round values ``m * 10**k`` (m in ``steps``) from ``low`` to ``high``."""
    decades = np.arange(np.floor(np.log10(low)) - 1, np.ceil(np.log10(high)) + 1)
    return [float(m * 10 ** d) for d in decades for m in steps if low <= m * 10 ** d <= high]


def log_tick_values(values: Iterable[float], most: int = 8) -> list[float]:
    """Where a log axis over ``values`` is labelled: at the data's own values when there are three to ``most`` of
    them (a doubling ladder: 51.2k, 102k, 205k, ...); with fewer, those and the round values between them (1, 1.5,
    2, 3, 5, 7 per decade, or coarser to stay within ``most``) not within 15% of one; with more, round values."""
    found = sorted({float(value) for value in values if np.isfinite(value) and value > 0})
    if 3 <= len(found) <= most:
        return found
    low, high = (found[0], found[-1]) if found else (1.0, 10.0)
    for steps in NICE:
        nice = round_values(low, high, steps)
        if len(found) > most:
            chosen = nice
        else:
            chosen = sorted(found + [value for value in nice if all(abs(np.log(value / f)) > np.log(1.15)
                                                                    for f in found)])
        if len(chosen) <= most:
            return chosen
    return chosen


def log_ticks(axis: plt.Axes, values: Iterable[float], which: str = "x", base: float = 10) -> list[float]:
    """Make ``axis`` a log axis over ``values``, labelled at ``log_tick_values`` in compact numbers (51.2k, 2M), a
    little room on each side; returns the labelled values."""
    found = sorted({float(value) for value in values if np.isfinite(value) and value > 0})
    ticks = log_tick_values(found)
    scale_axis = axis.xaxis if which == "x" else axis.yaxis
    (axis.set_xscale if which == "x" else axis.set_yscale)("log", base=base)
    scale_axis.set_major_locator(FixedLocator(ticks))
    scale_axis.set_major_formatter(FuncFormatter(lambda value, _: compact_number(value)))
    scale_axis.set_minor_formatter(NullFormatter())
    if found:
        pad = np.exp(0.06 * (np.log(found[-1] / found[0]) if len(found) > 1 else np.log(2)))
        (axis.set_xlim if which == "x" else axis.set_ylim)(found[0] / pad, found[-1] * pad)
    return ticks


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
