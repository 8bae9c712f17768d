"""The drafting-convention study (study `drafting`, issue 79): at T > 0 a drafter can propose its best tokens and
have them verified as if drawn with probability 1 (``topk``: EAGLE's convention, accepted with the target's
probability of the token) or draw its proposals from its own warped distribution and carry it (``sampled``: SD's,
accepted with min(1, p / q)). Each family's chain of one length runs both ways, as bench variants
``<stem>_topk`` and ``<stem>_sampled`` on the same prompts; this module pairs them: per family, prompt set and
temperature, the accepted drafts a step, tau and the paired speedup over `ar` of each, the ratio of the taus, and
the convention the family's main variant uses there (its calibration's choice, from its ``drafts`` option).
Torch-free.

    python -m harness drafting-table results/raw/*_chain_{topk,sampled}/*.jsonl results/raw/eagle/stdlib_code-t1.jsonl \
        --out results/studies/tables/drafting.csv
"""

from __future__ import annotations

import argparse
import json

import pandas as pd

from harness.analysis.summary import records_frame, summarize, write_table
from harness.analysis.tables import cell, interval_cell, markdown_table
from harness.errors import DraftcountError

CONVENTIONS = ("topk", "sampled")  # the suffixes of the two variants of one chain
COLUMNS = ["stem", "method", "dataset", "temperature", "main_drafts"] + [
    f"{measure}_{convention}" for convention in CONVENTIONS
    for measure in ("tau", "accepted_per_step", "speedup_paired_mean", "speedup_ci_low", "speedup_ci_high")] + [
    "tau_ratio"]


def convention_of(variant: str) -> tuple[str, str] | None:
    """``eagle_chain_topk`` -> (``eagle_chain``, ``topk``); None for a variant of neither convention."""
    for convention in CONVENTIONS:
        if variant.endswith(f"_{convention}") and len(variant) > len(convention) + 1:
            return variant[: -len(convention) - 1], convention
    return None


def main_drafts(summary: pd.DataFrame, method: str, temperature: float) -> str:
    """The convention ``method``'s main variant (the variant named as the method) drafts by at ``temperature``:
    its ``drafts`` option (its calibration's choice where it calibrated both), or "-" where it did not run or has
    no such option."""
    rows = summary[(summary.variant == method) & (summary.temperature == temperature)]
    chosen = {json.loads(text).get("drafts") for text in rows.get("options", pd.Series(dtype=str)).dropna()
              if isinstance(text, str) and text}
    chosen.discard(None)
    return ", ".join(sorted(chosen)) or "-"


def drafting_pairs(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per chain (``stem``), prompt set and temperature at which both conventions ran: each one's tau,
    accepted drafts a step and paired speedup with its interval, ``tau_ratio`` (sampled over topk) and the main
    variant's convention there."""
    rows: dict[tuple, dict] = {}
    for row in summary.itertuples():
        found = convention_of(row.variant)
        if found is None:
            continue
        stem, convention = found
        declared = json.loads(row.options).get("drafts") if isinstance(getattr(row, "options", None), str) else None
        if declared not in (None, convention):  # its name and its run disagree: the table would pair the wrong runs
            raise DraftcountError(f"drafting: variant {row.variant!r} is named for {convention} drafts but ran with "
                                  f"drafts: {declared}")
        key = (stem, row.dataset, float(row.temperature))
        entry = rows.setdefault(key, {"stem": stem, "method": row.method, "dataset": row.dataset,
                                      "temperature": float(row.temperature)})
        for measure in ("tau", "accepted_per_step", "speedup_paired_mean", "speedup_ci_low", "speedup_ci_high"):
            entry[f"{measure}_{convention}"] = getattr(row, measure, float("nan"))
    paired = [entry for entry in rows.values() if all(f"tau_{convention}" in entry for convention in CONVENTIONS)]
    for entry in paired:
        entry["tau_ratio"] = entry["tau_sampled"] / entry["tau_topk"]
        entry["main_drafts"] = main_drafts(summary, entry["method"], entry["temperature"])
    return pd.DataFrame(paired, columns=COLUMNS).sort_values(["temperature", "dataset", "method"], ignore_index=True)


def drafting_section(summary: pd.DataFrame) -> str:
    """The study's table: per chain, set and temperature, both conventions side by side; empty without pairs."""
    pairs = drafting_pairs(summary)
    if pairs.empty:
        return ""
    lines = []
    for row in pairs.itertuples():
        cells = [row.method, row.dataset, f"{row.temperature:g}"]
        for convention in CONVENTIONS:
            cells += [cell(getattr(row, f"accepted_per_step_{convention}"), "{:.2f}"),
                      cell(getattr(row, f"tau_{convention}"), "{:.2f}"),
                      interval_cell(*(getattr(row, f"{measure}_{convention}") for measure in
                                      ("speedup_paired_mean", "speedup_ci_low", "speedup_ci_high")))]
        lines.append(cells + [f"{row.tau_ratio:.2f}", row.main_drafts])
    return markdown_table(["family", "dataset", "T", "top-k: accepted a step", "top-k: tau", "top-k: speedup [95%]",
                           "sampled: accepted a step", "sampled: tau", "sampled: speedup [95%]",
                           "tau, sampled / top-k", "main variant drafts"], lines)


def run(args: argparse.Namespace) -> int:
    """``drafting-table``: the pairs of the given records written to ``--out``, and shown."""
    for path in args.records:
        if not path.is_file():
            raise DraftcountError(f"drafting-table: no records file {path}")
    summary = summarize(records_frame(args.records))
    pairs = drafting_pairs(summary)
    if pairs.empty:
        raise DraftcountError("drafting-table: no chain ran by both conventions (variants <stem>_topk and "
                              "<stem>_sampled at one prompt set and temperature)")
    write_table(pairs, args.out)
    print(drafting_section(summary))
    return 0
