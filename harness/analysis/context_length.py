"""Results by context length: tau and the paired speedup over `ar` per long-context bucket (OWL's question: does
a drafter hold up as the context grows past what it was trained on?).

The long-context prompt set (``harness.data.long_context``) gives each prompt its bucket as its category
(``ctx<L>``); every turn of such a category is measured in its bucket alone. Tau and the paired speedup are
those of the per-category view (``harness.analysis.categories.category_row``: ``summary.tau`` and
``timing.paired_speedup``); nothing is redefined here. Turns of other categories are left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from harness.analysis.categories import category_row, variant_order
from harness.analysis.tables import cell, markdown_table

if TYPE_CHECKING:
    import matplotlib.pyplot as plt

    from harness.analysis.view import Inputs

CATEGORY_PREFIX = "ctx"  # the long-context prompt set's categories: ctx<bucket> (harness.data.long_context)
CONTEXT_COLUMNS = ["variant", "method", "dataset", "temperature", "context_tokens", "prompts", "turns", "tau",
                   "speedup_paired_mean", "speedup_ci_low", "speedup_ci_high"]


def category_bucket(category: str) -> int | None:
    """The bucket of a long-context category (``ctx512`` -> 512), None for any other category."""
    digits = category[len(CATEGORY_PREFIX):] if category.startswith(CATEGORY_PREFIX) else ""
    return int(digits) if digits.isdigit() else None


def context_length_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant x dataset x temperature x context bucket (turns of ``ctx<L>`` categories): prompts, turns, tau
    and the paired speedup, buckets ascending."""
    buckets = frame.category.fillna("").map(category_bucket)
    frame = frame[buckets.notna()].assign(context_tokens=buckets[buckets.notna()].astype(int))
    baseline = frame[frame.role == "baseline"].set_index(["run", "pair_id"])
    rows = []
    methods = frame[(frame.role == "method") & (frame.variant != "ar")]
    for keys, group in methods.groupby(["variant", "method", "dataset", "temperature", "context_tokens"]):
        labels = dict(zip(["variant", "method", "dataset", "temperature", "context_tokens"], keys))
        rows.append({**labels, **category_row(group, baseline)})
    return pd.DataFrame(rows).reindex(columns=CONTEXT_COLUMNS)


def plot_context_length(data: Inputs) -> plt.Figure:
    """One panel per dataset and temperature: tau against the context length (tokens, log 2 axis labelled at the
    buckets), one line per variant (main ones first), each in its variant's colour, marker and line style."""
    from harness.analysis.plotting import figure_legend, plt, temperature_label, variant_styles

    main, styles = data.main, variant_styles(data.summary)
    panels = list(data.table("context_length").groupby(["dataset", "temperature"]))
    figure, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 1.2, 2.6), squeeze=False, sharey=True,
                                layout="constrained")
    for axis, ((dataset, temperature), group) in zip(axes[0], panels):
        for variant in variant_order(list(group.variant.unique()), main):
            rows = group[group.variant == variant].sort_values("context_tokens")
            style = styles.get(variant)
            axis.plot(rows.context_tokens, rows.tau, color=style.color if style else None,
                      marker=style.marker if style else "o", linestyle=style.linestyle if style else "-",
                      label=variant, markersize=3.5, linewidth=1.0)
        buckets = sorted(group.context_tokens.unique())
        axis.set_xscale("log", base=2)
        axis.set_xticks(buckets, [str(v) for v in buckets])
        axis.minorticks_off()
        axis.set_xlabel("context length (prompt tokens, bucket)")
        axis.set_title(f"{dataset}, {temperature_label(temperature)}")
    axes[0][0].set_ylabel("tau (accepted length per step)")
    figure_legend(figure, axes[0])
    return figure


def context_section(table: pd.DataFrame, main: list[str]) -> str:
    """The report's by-context-length table: one row per variant x dataset x temperature, tau per bucket (and the
    paired speedup in the longest one); empty without a long-context prompt set."""
    if table.empty:
        return ""
    buckets = sorted(int(bucket) for bucket in table.context_tokens.unique())
    header = ["variant", "dataset", "T", *(f"tau @{bucket}" for bucket in buckets),
              f"speedup @{buckets[-1]} [95% CI]"]
    rows = []
    for (dataset, temperature), group in table.groupby(["dataset", "temperature"]):
        for variant in variant_order(list(group.variant.unique()), main):
            mine = group[group.variant == variant].set_index("context_tokens")
            longest = mine.loc[buckets[-1]] if buckets[-1] in mine.index else None
            speedup = ("-" if longest is None else f"{longest.speedup_paired_mean:.2f} "
                       f"[{longest.speedup_ci_low:.2f}, {longest.speedup_ci_high:.2f}]")
            rows.append([variant, dataset, f"{temperature:g}",
                         *(cell(mine.tau.get(bucket, float("nan")), "{:.3f}") for bucket in buckets), speedup])
    return markdown_table(header, rows)
