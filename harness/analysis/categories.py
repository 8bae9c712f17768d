"""Results per category of a prompt set: Spec-Bench's standard view (its paper's table and figure).

Spec-Bench's 13 categories fall into six tasks: multi-turn conversation (MT-Bench's eight categories, one task
``mt_bench`` as its ``speed.py --task mt_bench`` groups them), translation, summarization, QA, math reasoning and
RAG. A prompt set holding some of those tasks is shown by task; any other set with several categories (MT-Bench
alone, the zoo's stdlib_domains) by its own categories. Each cell is the paired speedup over `ar` (geometric mean
of per-turn ratios with its prompt-bootstrap interval, ``harness.analysis.timing``) and tau, measured on that
category's turns only; ``overall`` is the whole set. Sets with a single category have no rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from harness.analysis.specbench import MT_BENCH_CATEGORIES
from harness.analysis.summary import paired_with_ar, tau
from harness.analysis.tables import markdown_table
from harness.analysis.timing import paired_speedup

if TYPE_CHECKING:
    import matplotlib.pyplot as plt

    from harness.analysis.view import Inputs

SPEC_BENCH_TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
CATEGORY_COLUMNS = ["variant", "method", "dataset", "temperature", "category", "prompts", "turns", "tau",
                    "speedup_paired_mean", "speedup_ci_low", "speedup_ci_high"]
OVERALL = "overall"


def task_names(categories: pd.Series) -> pd.Series:
    """Each turn's column in the table: its Spec-Bench task where the set holds Spec-Bench's other tasks, else
    its category."""
    spec_bench = bool(set(categories) & set(SPEC_BENCH_TASKS[1:]))
    return categories.where(~(spec_bench & categories.isin(MT_BENCH_CATEGORIES)), "mt_bench")


def category_row(turns: pd.DataFrame, baseline: pd.DataFrame) -> dict[str, float]:
    paired = paired_with_ar(turns, baseline)
    row = {"prompts": turns.prompt_id.nunique(), "turns": len(turns), "tau": tau(turns)}
    if len(paired):
        speedup = paired_speedup(paired)
        row.update({key: speedup[key] for key in ("speedup_paired_mean", "speedup_ci_low", "speedup_ci_high")})
    return row


def category_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant x dataset x temperature x category (task) of a multi-category set: prompts, turns, tau and the
    paired speedup; plus an ``overall`` row per set."""
    baseline = frame[frame.role == "baseline"].set_index(["run", "pair_id"])
    rows = []
    methods = frame[(frame.role == "method") & (frame.variant != "ar")]
    for keys, group in methods.groupby(["variant", "method", "dataset", "temperature"]):
        tasks = task_names(group.category.fillna(""))
        if tasks.nunique() < 2:
            continue
        labels = dict(zip(["variant", "method", "dataset", "temperature"], keys))
        for task, turns in group.groupby(tasks, sort=False):
            rows.append({**labels, "category": task, **category_row(turns, baseline)})
        rows.append({**labels, "category": OVERALL, **category_row(group, baseline)})
    return pd.DataFrame(rows).reindex(columns=CATEGORY_COLUMNS)


def category_order(table: pd.DataFrame) -> list[str]:
    seen = list(dict.fromkeys(table.category))
    known = [task for task in SPEC_BENCH_TASKS if task in seen]
    return known + [name for name in seen if name not in known and name != OVERALL] + [OVERALL]


def variant_order(variants: list[str], main: list[str]) -> list[str]:
    """The main variants first (in their order), then the others (ablations that ran on the set) by name."""
    return [name for name in main if name in variants] + sorted(set(variants) - set(main))


def category_sections(table: pd.DataFrame, main: list[str]) -> str:
    """Markdown: per dataset and temperature, one row per variant (main ones first), one column per category:
    speedup (tau)."""
    lines: list[str] = []
    for (dataset, temperature), group in table.groupby(["dataset", "temperature"]):
        columns = category_order(group)
        cells = []
        for variant in variant_order(list(group.variant.unique()), main):
            by_task = group[group.variant == variant].set_index("category")
            cells.append([variant] + [
                f"{by_task.at[name, 'speedup_paired_mean']:.2f}x ({by_task.at[name, 'tau']:.2f})"
                if name in by_task.index and pd.notna(by_task.at[name, "speedup_paired_mean"]) else "-"
                for name in columns])
        lines += [f"**{dataset}, T = {temperature:g}** (cells: speedup over ar (tau))", "",
                  markdown_table(["variant", *columns], cells), ""]
    return "\n".join(lines[:-1])


def plot_categories(data: Inputs) -> plt.Figure:
    """One panel per dataset and temperature: speedup per category, one bar per variant (main ones first)."""
    from harness.analysis.plotting import plt, temperature_label, variant_colors

    main, colors = data.main, variant_colors(data.summary)
    panels = list(data.table("categories").groupby(["dataset", "temperature"]))
    figure, axes = plt.subplots(len(panels), 1, figsize=(7.0, 2.4 * len(panels)), squeeze=False)
    for axis, ((dataset, temperature), group) in zip(axes[:, 0], panels):
        columns = category_order(group)
        variants = variant_order(list(group.variant.unique()), main)
        width = 0.8 / max(len(variants), 1)
        for index, variant in enumerate(variants):
            rows = group[group.variant == variant].set_index("category").reindex(columns)
            positions = np.arange(len(columns)) + (index - (len(variants) - 1) / 2) * width
            errors = np.nan_to_num(np.vstack([(rows.speedup_paired_mean - rows.speedup_ci_low).clip(lower=0),
                                              (rows.speedup_ci_high - rows.speedup_paired_mean).clip(lower=0)]))
            axis.bar(positions, rows.speedup_paired_mean, width, yerr=errors, color=colors.get(variant),
                     label=variant, error_kw={"elinewidth": 0.6, "capsize": 1.5})
        axis.set_xticks(np.arange(len(columns)), columns)
        axis.axhline(1.0, color="black", linewidth=0.7, linestyle=":")
        axis.set_ylabel("speedup over ar")
        axis.set_title(f"{dataset}, {temperature_label(temperature)}")
    axes[0][0].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure
