"""suffix's view: where its drafts came from (the request's own tree or the global tree of earlier outputs) and how
long its matches were (the report's *Suffix Decoding* section and ``tables/suffix.csv``). Read by
``harness.analysis.views`` without importing the method's code: torch-free, as every view."""

from __future__ import annotations

import pandas as pd

from harness.analysis.tables import cell, markdown_table
from harness.analysis.view import Inputs, Scope, View

METHOD = "suffix"
SUFFIX_COLUMNS = ["variant", "dataset", "temperature", "turns", "steps", "global_share", "request_share",
                  "no_draft_share", "mean_match_tokens", "mean_cached_requests"]


def suffix_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per suffix variant x dataset x temperature: the share of verification steps drafted from the global tree,
    from the request's own tree and with no draft (no match above the probability floor), the mean match length of
    a drafting step, and the mean number of earlier outputs in the global tree when a turn began."""
    methods = frame[(frame.role == "method") & (frame.method == METHOD)]
    rows = []
    for (variant, dataset, temperature), group in methods.groupby(["variant", "dataset", "temperature"]):
        steps = int(group.verify_steps.sum())
        extra = {key: sum(item.get(key, 0) for item in group.extra) for key in
                 ("suffix_global_drafts", "suffix_request_drafts", "suffix_match_tokens", "suffix_cached_requests")}
        drafting = extra["suffix_global_drafts"] + extra["suffix_request_drafts"]
        rows.append({"variant": variant, "dataset": dataset, "temperature": temperature, "turns": len(group),
                     "steps": steps, "global_share": extra["suffix_global_drafts"] / max(steps, 1),
                     "request_share": extra["suffix_request_drafts"] / max(steps, 1),
                     "no_draft_share": 1 - drafting / max(steps, 1),
                     "mean_match_tokens": extra["suffix_match_tokens"] / max(drafting, 1),
                     "mean_cached_requests": extra["suffix_cached_requests"] / max(len(group), 1)})
    return pd.DataFrame(rows, columns=SUFFIX_COLUMNS)


def suffix_section(table: pd.DataFrame, summary: pd.DataFrame) -> str:
    if table.empty:
        return ""
    indexed = summary.set_index(["variant", "dataset", "temperature"])
    header = ["variant", "dataset", "T", "steps", "global tree", "own tree", "no draft", "match (tokens)",
              "outputs cached", "tau", "speedup"]
    rows = []
    for _, row in table.sort_values(["dataset", "temperature", "variant"]).iterrows():
        key = (row.variant, row.dataset, row.temperature)
        tau = indexed.tau.get(key, float("nan"))
        speedup = indexed.speedup_paired_mean.get(key, float("nan"))
        rows.append([row.variant, row.dataset, f"{row.temperature:g}", str(row.steps), f"{row.global_share:.2f}",
                     f"{row.request_share:.2f}", f"{row.no_draft_share:.2f}", f"{row.mean_match_tokens:.1f}",
                     f"{row.mean_cached_requests:.1f}", cell(tau, "{:.2f}"), cell(speedup, "{:.2f}")])
    return markdown_table(header, rows)


def _section(data: Inputs) -> str:
    return suffix_section(data.table("suffix"), data.summary)


def _runs_suffix(scope: Scope) -> bool:
    return scope.runs(METHOD)


VIEWS = (
    View("suffix", applies=_runs_suffix, table=suffix_table, after="samples", title="Suffix Decoding (suffix)",
         section=_section,
         intro="Where each step's draft came from: the global tree over the run's earlier outputs, the request's "
               "own tree (prompt and output so far), or neither (no match kept a node above `min_token_prob`); the "
               "mean match length of a drafting step; and how many earlier outputs the global tree held when a turn "
               "began (the run's order: on `stdlib_edits`, the versions of one module follow each other)."),
)
