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


def figure_rows(group: pd.DataFrame, order: list[str], main: list[str]) -> list[str]:
    """A panel's rows: its main variants, then its ablations, each in the figures' fixed order (``order``)."""
    present = set(group.variant)
    return ([v for v in order if v in present and v in main] + [v for v in order if v in present and v not in main]
            + sorted(present - set(order)))


def speedup_cells(group: pd.DataFrame, rows: list[str], columns: list[str]) -> tuple[pd.DataFrame, ...]:
    """One panel's cells (variants x categories): the speedups, their texts, what is missing, and which intervals
    leave 1 (bold)."""
    table = group.drop_duplicates(["variant", "category"]).set_index(["variant", "category"])
    values = table.speedup_paired_mean.unstack("category").reindex(index=rows, columns=columns).astype(float)
    low = table.speedup_ci_low.unstack("category").reindex(index=rows, columns=columns).astype(float)
    high = table.speedup_ci_high.unstack("category").reindex(index=rows, columns=columns).astype(float)
    texts = values.map(lambda value: "" if pd.isna(value) else f"{value:.2f}")
    return values, texts, values.isna(), (low > 1) | (high < 1)


def plot_categories(data: Inputs) -> plt.Figure:
    """One heat map per dataset (rows of panels) and temperature (columns): the paired speedup over ar per variant
    (rows: main variants first, then ablations, each in the figures' fixed order) and category (columns, ``overall``
    last), each cell's value written in it, bold where its 95% interval leaves 1; blue above 1, red below."""
    from matplotlib.colors import TwoSlopeNorm

    from harness.analysis.plot_rows import heatmap
    from harness.analysis.plotting import plt, temperature_label, variant_order as figure_order

    table, order = data.table("categories"), figure_order(data.summary)
    datasets, temperatures = sorted(table.dataset.unique()), sorted(table.temperature.unique())
    heights = [len(table[table.dataset == dataset].variant.unique()) for dataset in datasets]
    widths = max(len(category_order(table[table.dataset == dataset])) for dataset in datasets)
    values = table.speedup_paired_mean.astype(float)
    norm = TwoSlopeNorm(1.0, min(float(values.min()), 0.8), max(float(values.max()), 1.25))
    size = (0.5 * widths * len(temperatures) + 2.4, 0.7 * len(datasets) + 0.19 * sum(heights))
    figure, axes = plt.subplots(len(datasets), len(temperatures), squeeze=False, layout="constrained", figsize=size,
                                gridspec_kw={"height_ratios": heights})
    image = None
    for (row, dataset), (column, temperature) in ((r, c) for r in enumerate(datasets) for c in enumerate(temperatures)):
        axis = axes[row][column]
        group = table[(table.dataset == dataset) & (table.temperature == temperature)]
        columns = category_order(table[table.dataset == dataset])
        rows = figure_rows(table[table.dataset == dataset], order, data.main)
        cells, texts, hidden, bold = speedup_cells(group, rows, columns)
        image = heatmap(axis, cells, texts, hidden, "RdBu", norm, fontsize=5.5, weights=bold)
        axis.set_title(f"{dataset}, {temperature_label(temperature)}")
        plt.setp(axis.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor")
        if column:
            axis.set_yticklabels([])
    if image is not None:
        figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, label="speedup over ar (bold: 95% interval "
                        "leaves 1)")
    return figure
