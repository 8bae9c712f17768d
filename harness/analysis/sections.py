"""Report sections read from the summary and the samples table: the results table (the report's main tables and
the ablations against their defaults), traversal against token-level verification, and samples by index; and the
studies report's drafter studies (learning curves, their stability and fitted lines, the lr study) from their rules'
tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.learning_curves import (
    per_temperature,
    steps_label,
    with_mean_agreement,
)
from harness.analysis.metrics import report_metrics
from harness.analysis.tables import cell, interval_cell, markdown_table, metric_cells
from harness.analysis.view import Inputs


def results_table(summary: pd.DataFrame) -> str:
    """A markdown table of the summary rows given, one row per variant x dataset x temperature."""
    table = summary.copy()
    table["speedup_ci"] = [
        "-" if pd.isna(low) else f"[{low:.2f}, {high:.2f}]"
        for low, high in zip(table.speedup_ci_low, table.speedup_ci_high)]
    columns = report_metrics()
    if "repeats" in table and (table.repeats.fillna(1) > 1).any():  # bench.repeats: mean +- std over runs
        columns = report_metrics([*[metric.name for metric in columns], "speedup_repeat_std"])
    header = ["variant", "dataset", "T"] + [metric.label for metric in columns]
    rows = []
    for _, row in table.iterrows():
        cells = [row.variant, row.dataset, f"{row.temperature:g}"]
        cells += metric_cells(row, columns)
        rows.append(cells)
    return markdown_table(header, rows)


def ablations_section(summary: pd.DataFrame, main: list[str]) -> str:
    """The variants outside ``main`` (ablations, budget sweeps) beside their method's default variant on the same
    datasets; empty when every variant is a main one."""
    ablations = summary[~summary.variant.isin(main)]
    if ablations.empty:
        return ""
    defaults = summary[summary.variant.isin(set(ablations.method)) & summary.dataset.isin(set(ablations.dataset))]
    return results_table(pd.concat([defaults, ablations]).sort_values(["temperature", "method", "variant"]))


def verifier_comparison(summary: pd.DataFrame) -> str:
    """Tau of each traversal-verified variant beside the token-level variant with the same method, options,
    dataset and temperature (the same trees, verified two ways); empty when there is no such pair."""
    keys = ["method", "options", "dataset", "temperature"]
    token = summary[summary.verifier == "token_level"]
    traversal = summary[summary.verifier == "traversal"]
    pairs = traversal.merge(token, on=keys, suffixes=("_tv", ""))
    # several token-level variants with the same options (one run with several samples per prompt, say): the
    # one the traversal variant is named after (`eagle` for `eagle_tv`), if there is one
    named = pairs.variant + "_tv" == pairs.variant_tv
    has_named = named.groupby([pairs.variant_tv, pairs.dataset]).transform("any")
    pairs = pairs[named | ~has_named]
    if pairs.empty:
        return ""
    rows = [[row.variant, row.variant_tv, row.dataset, f"{row.temperature:g}", f"{row.tau:.3f}", f"{row.tau_tv:.3f}",
             f"{100 * (row.tau_tv / row.tau - 1):+.1f}%", cell(row.speedup_paired_mean, "{:.2f}"),
             cell(row.speedup_paired_mean_tv, "{:.2f}")]
            for _, row in pairs.sort_values(["temperature", "method", "dataset"]).iterrows()]
    return markdown_table(["variant", "traversal variant", "dataset", "T", "tau", "tau (traversal)", "change",
                           "speedup", "speedup (traversal)"], rows)


def samples_section(samples: pd.DataFrame) -> str:
    """Tau and paired speedup per sample index (``summary.sample_table``: variants run with several samples per
    prompt); empty without such a variant."""
    if samples.empty:
        return ""
    rows = [[row.variant, row.dataset, f"{row.temperature:g}", str(int(row["sample"]) + 1), str(int(row.turns)),
             f"{row.tau:.3f}", cell(row.speedup_paired_mean, "{:.2f}")]
            for _, row in samples.sort_values(["variant", "dataset", "temperature", "sample"]).iterrows()]
    return markdown_table(["variant", "dataset", "T", "sample", "turns", "tau", "speedup"], rows)


def mean_agreement(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """A learning-curve or lr table with its mean held-out agreement over the steps every family records
    (``learning_curves.with_mean_agreement``, from ``agreement_by_step``) and that column's label ("" when the
    shared steps are step 1 alone: the step-1 column says it); a table written before the mean covered shared steps,
    and without the steps, keeps its ``agreement_mean3`` and says so."""
    if "agreement_by_step" in table:
        table = with_mean_agreement(table)
        return table, "" if table.agreement_steps.iloc[0] == 1 else f"agreement, {steps_label(table)} (mean)"
    if "agreement_mean" in table:
        return table, "agreement (mean)"
    return table.rename(columns={"agreement_mean3": "agreement_mean"}), "agreement, steps 1-3 (mean; steps differ)"


def chain_cells(row: Any, temperatures: dict[str, str]) -> list[str]:
    """A rung's chain tau and paired speedup (with its interval) at each temperature its chains ran."""
    cells = []
    for at in temperatures:
        cells += [cell(row.get(f"chain_tau_t{at}"), "{:.2f}"), speedup_interval(row, f"chain_speedup_t{at}")]
    return cells


def speedup_interval(row: Any, column: str) -> str:
    """``row``'s speedup in ``column`` with its interval (``<column>_low``, ``_high``)."""
    return interval_cell(row.get(column), row.get(f"{column}_low"), row.get(f"{column}_high"))


def learning_curves_section(curves: pd.DataFrame) -> str:
    """The learning curves (rule learning_curves' table): per family and rung, its training positions, held-out
    agreement at step 1 and over the shared steps, and where its chains ran, their tau and paired speedup."""
    if curves.empty:
        return ""
    curves, label = mean_agreement(curves)
    temperatures = per_temperature(curves.columns, "chain_tau")
    perplexity = "heldout_perplexity" in curves and curves.heldout_perplexity.notna().any()  # the draft LM's rungs
    header = ["family", "rung", "positions", "agreement, step 1", *([label] if label else [])]
    header += ["held-out perplexity"] if perplexity else []
    header += [name for at in temperatures for name in (f"chain tau, T = {at}", f"chain speedup, T = {at}")]
    rows = [[row["family"], f"{row['rung']:g}x", cell(row["tokens"], "{:,.0f}"), f"{row['agreement_step1']:.3f}",
             *([cell(row["agreement_mean"], "{:.3f}")] if label else []),
             *([cell(row["heldout_perplexity"], "{:.1f}")] if perplexity else []), *chain_cells(row, temperatures)]
            for _, row in curves.sort_values(["family", "rung"]).iterrows()]
    return markdown_table(header, rows)


def calibrated_section(curves: pd.DataFrame) -> str:
    """Each rung at its own calibrated shape (the learning curves' ``calibrated_*`` columns), for the families
    whose rungs ran so: per temperature the shape chosen, accepted drafts per step, tau and paired speedup."""
    temperatures = per_temperature(curves.columns, "calibrated_tau")
    if curves.empty or not temperatures:
        return ""
    found = curves[curves[list(temperatures.values())].notna().any(axis=1)]
    header, rows = ["family", "rung", "positions"], []
    for at in temperatures:
        header += [f"shape, T = {at}", "accepted a step", "tau", "speedup [95%]"]
    for _, row in found.sort_values(["family", "rung"]).iterrows():
        cells = [row["family"], f"{row['rung']:g}x", cell(row["tokens"], "{:,.0f}")]
        for at in temperatures:
            shape = row.get(f"calibrated_shape_t{at}")
            cells += [shape if isinstance(shape, str) else "-", cell(row.get(f"calibrated_accepted_t{at}"), "{:.2f}"),
                      cell(row.get(f"calibrated_tau_t{at}"), "{:.2f}"), speedup_interval(row, f"calibrated_speedup_t{at}")]
        rows.append(cells)
    return markdown_table(header, rows)


def stability_section(stability: pd.DataFrame) -> str:
    """Kendall's tau between adjacent rungs' orders of the families, by step-1 agreement and by each chain tau."""
    if stability.empty:
        return ""
    chains = per_temperature(stability.columns, "kendall_tau_chain_tau")
    header = ["rungs", "families", "by agreement, step 1", *(f"by chain tau, T = {at}" for at in chains)]
    rows = [[f"{row['rung']:g}x -> {row['next_rung']:g}x", str(int(row["families"])), cell(row["kendall_tau"], "{:.2f}"),
             *(cell(row[column], "{:.2f}") for column in chains.values())] for _, row in stability.iterrows()]
    return markdown_table(header, rows)


FIT_METRICS = {"agreement_step1": "step 1", "agreement_mean": "mean"}  # curve_fit.METRICS, in words


def fit_section(fits: pd.DataFrame) -> str:
    """The fitted lines (rule learning_curves' ``learning_curves_fit`` table): per family and metric, the agreement a
    doubling of the positions adds with its 95% interval, R^2, the rungs and positions it rests on, and on the
    meeting family's rows where its line meets the reference family's."""
    if fits.empty:
        return ""
    rows = []
    for _, row in fits.sort_values(["family", "metric"]).iterrows():
        metric = FIT_METRICS.get(row["metric"], row["metric"])
        if metric == "mean":
            metric = f"mean, steps 1-{int(row['steps'])}" if int(row["steps"]) > 1 else "mean, step 1"
        interval = (f" [{row['slope_ci_low']:+.3f}, {row['slope_ci_high']:+.3f}]"
                    if pd.notna(row["slope_ci_low"]) else " (two rungs: no interval)")
        meeting = f"{row['meeting']} ({row['meets']})" if isinstance(row["meets"], str) and row["meets"] else "-"
        rows.append([row["family"], metric, cell(row["slope_per_doubling"], "{:+.3f}") + interval,
                     cell(row["r2"], "{:.2f}"), str(int(row["rungs"])),
                     f"{row['positions_min']:,.0f}-{row['positions_max']:,.0f}", meeting])
    return markdown_table(["family", "agreement", "slope a doubling [95%]", "R^2", "rungs", "positions",
                           "meets"], rows)


def lr_section(lr: pd.DataFrame) -> str:
    """The lr study (rule lr_study's table): each family's rates, the agreement they reached, the one chosen."""
    if lr.empty:
        return ""
    lr, label = mean_agreement(lr)
    rows = [[row["family"], f"{row['lr']:g}" + (" (chosen)" if bool(row["chosen"]) else ""),
             cell(row["tokens"], "{:,.0f}"), f"{row['agreement_step1']:.3f}",
             *([f"{row['agreement_mean']:.3f}"] if label else [])]
            for _, row in lr.sort_values(["family", "lr"]).iterrows()]
    return markdown_table(["family", "learning rate", "positions", "agreement, step 1", *([label] if label else [])],
                          rows)


def dump_precision_section(table: pd.DataFrame) -> str:
    """Study dump_precision (rule dump_precision's table): per draft step, the held-out agreement of the family
    trained on the float32 feature dump and on its float16 copy, the difference with its paired bootstrap interval,
    and the dumps' sizes on disk; empty without the table."""
    if table.empty:
        return ""
    agreement = table.pivot(index="step", columns="precision", values="agreement")
    half = table[table.precision == "float16"].set_index("step")
    rows = [[str(step), f"{agreement.loc[step, 'float32']:.3f}", f"{agreement.loc[step, 'float16']:.3f}",
             cell(half.loc[step, "diff_vs_float32"], "{:+.3f}") + ("" if pd.isna(half.loc[step, "diff_ci_low"]) else
                                                                   f" [{half.loc[step, 'diff_ci_low']:+.3f}, "
                                                                   f"{half.loc[step, 'diff_ci_high']:+.3f}]")]
            for step in agreement.index]
    sizes = "; ".join(f"{row.precision} {row.dump_bytes / 2**20:,.1f} MiB ({row.bytes_per_position:g} bytes a "
                      f"position x {row.positions:,})" for row in table.drop_duplicates("precision").itertuples())
    first = table.iloc[0]
    return "\n".join([
        f"**Feature dump precision.** {first.family} trained on a float32 feature dump and on its float16 copy (the "
        f"same windows, seed, batches and {first.train_steps:,} steps; {first.train_tokens:,} positions), held-out "
        f"top-1 agreement on the same windows, float16 - float32 with a paired bootstrap 95% interval over them. "
        f"On disk: {sizes}.", "",
        markdown_table(["draft step", "float32", "float16", "float16 - float32"], rows)])


def drafter_studies_section(data: Inputs) -> str:
    """The drafter studies in the studies report: the learning curves, their stability, the lr study (each where
    its table was written into the report's tables folder), and the learning-curve figure where rule
    learning_curves drew it beside them (``figures/learning_curves.png`` next to the report)."""
    parts = []
    curves, stability = learning_curves_section(data.table("learning_curves")), stability_section(
        data.table("learning_curves_stability"))
    if curves:
        parts += [("**Learning curves.** Each family retrained at multiples of the main budget (1x: the main drafter), "
                  "read by held-out top-1 agreement with the target (the same draft steps for every family) and, "
                  "where they ran, by a chain of one length on one prompt set:"), "", curves, ""]
    calibrated = calibrated_section(data.table("learning_curves"))
    if calibrated:
        parts += [("**The regime each budget reaches.** Every rung of these families benchmarked as its family's "
                   "main variant, its tree shape or chain length calibrated for that rung's drafter (1x: the main "
                   "comparison's runs on that set): the shape chosen, accepted drafts per step, tau and the paired "
                   "speedup over `ar`:"), "", calibrated, ""]
    if stability:
        parts += [("**Stability of the ranking.** Kendall's tau between adjacent rungs' orders of the families (1: "
                  "the same order; -1: reversed):"), "", stability, ""]
    fits = fit_section(data.table("learning_curves_fit"))
    if fits:
        parts += [("**Fitted lines.** Held-out agreement against log2 of the positions, least squares over each "
                  "family's rungs: the agreement a doubling adds (95% t interval), and where lyanna's line would meet "
                  "eagle's (an extrapolation; `does not meet within 100x` and `lines diverge` say it would not):"), "",
                  fits, ""]
    figure = Path(data.tables_dir or ".").parent / "figures" / "learning_curves.png"
    if curves and figure.is_file():
        parts += ["![learning curves](figures/learning_curves.png)", ""]
    lr = lr_section(data.table("lr"))
    if lr:
        parts += [("**Learning rates.** Each family at the rates beside its own on the ladder, at its main budget; "
                  "the rate of highest mean held-out agreement chosen (never the benchmark prompts):"), "", lr, ""]
    precision = dump_precision_section(data.table("dump_precision"))
    if precision:
        parts += [precision, ""]
    return "\n".join(parts).strip()
