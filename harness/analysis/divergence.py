"""Where a method's greedy output leaves its paired `ar` output.

In float32 a lossless method matches `ar` token for token. In bf16 (or fp16)
the verify forward over a tree and `ar`'s one-token forward round differently,
so near-ties can flip and the texts part ways; this table says how often and
from which generated token on. Built from paired records (``run
--pair-with-ar``) at temperature 0.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import DraftcountError
from harness.store.records import read_records


def first_divergence(ours: list[int], theirs: list[int]) -> int | None:
    """Index of the first differing token (a length difference counts at the shorter's end); None if equal."""
    for index, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return index
    return None if len(ours) == len(theirs) else min(len(ours), len(theirs))


def divergence_table(paths: list[Path]) -> pd.DataFrame:
    """One row per variant x dataset x dtype: greedy pairs compared, how many diverged, where they first did."""
    positions: dict[tuple[str, str, str], list[int | None]] = defaultdict(list)
    for path in paths:
        records = [r for r in read_records(path) if r["sampling"]["temperature"] == 0]
        baseline = {r["pair_id"]: r["output_ids"] for r in records if r["role"] == "baseline"}
        for record in records:
            if record["role"] != "method" or record["pair_id"] not in baseline:
                continue
            key = (record["variant"], record["dataset"], record["dtype"])
            positions[key].append(first_divergence(record["output_ids"], baseline[record["pair_id"]]))
    if not positions:
        raise DraftcountError("no greedy records paired with `ar` (run --pair-with-ar at temperature 0) in "
                              + ", ".join(map(str, paths)))
    rows: list[dict[str, Any]] = []
    for (variant, dataset, dtype), found in sorted(positions.items()):
        diverged = [p for p in found if p is not None]
        rows.append({"variant": variant, "dataset": dataset, "dtype": dtype, "pairs": len(found),
                     "diverged": len(diverged), "diverged_fraction": len(diverged) / len(found),
                     "first_divergence_min": min(diverged) if diverged else None,
                     "first_divergence_median": statistics.median(diverged) if diverged else None})
    return pd.DataFrame(rows)
