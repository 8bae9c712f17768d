"""Report sections read from the summary and the samples table: the results table (the report's main tables and
the ablations against their defaults), traversal against token-level verification, and samples by index."""

from __future__ import annotations

import pandas as pd

from harness.analysis.metrics import report_metrics
from harness.analysis.tables import cell, markdown_table, metric_cells


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
