"""What every figure shares: matplotlib on its file backend (Agg), the paper style, one colour per method (its
catalog entry's) and shades of it per variant, the variants' order, the temperature labels and the atomic writer.

The views' own figure functions (``harness.analysis.figures``, ``categories``, ``context_length``, ``families``, a
method's ``view.py``) import these when they draw, so this module imports no view: the views import nothing that
imports them back.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

from harness.catalog import catalog  # noqa: E402
from harness.store.atomic import atomic_path  # noqa: E402

EXTRA_COLORS = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
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


def temperature_label(temperature: float) -> str:
    return "greedy (T = 0)" if temperature == 0 else f"T = {temperature:g}"


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
