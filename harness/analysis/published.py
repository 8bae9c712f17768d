"""The published records and what they re-derive. Rule ``records`` (workflow/rules/report.smk) commits the raw records
the main report reads (the main comparison's and the claims' studies': ``results/<target>/records/<variant>/
<dataset>-t<T>.jsonl.gz``, gzip without a timestamp); ``python -m harness claims RECORDS... --out-dir DIR`` rebuilds
from them alone the summary table and the paper's-claims table (``DIR/summary.csv``, ``DIR/claims.csv``: the same
code as ``summarize``), and with ``--compare TABLES`` checks both against a report's committed tables.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.summary import records_frame, summarize, write_table
from harness.analysis.view import SUMMARY
from harness.analysis.views import all_views
from harness.errors import DraftcountError

CLAIMS = "claims"  # the paper's claims' table (methods/lyanna/view.py)


def rederive_tables(records: list[Path], out_dir: Path) -> list[Path]:
    """``out_dir/summary.csv`` and ``out_dir/claims.csv`` from the records files alone; the paths written."""
    missing = [str(path) for path in records if not Path(path).is_file()]
    if missing:
        raise DraftcountError(f"no records file {missing[0]}")
    views = [view for view in all_views() if view.table_file == CLAIMS and view.table is not None]
    if not views:
        raise DraftcountError(f"no view writes table {CLAIMS!r} (is lyanna's view installed?)")
    frame = records_frame(records)
    written = [Path(out_dir) / f"{SUMMARY}.csv", Path(out_dir) / f"{CLAIMS}.csv"]
    write_table(summarize(frame), written[0])
    write_table(views[0].table(frame), written[1])
    return written


def first_difference(mine: pd.DataFrame, theirs: pd.DataFrame, rtol: float = 1e-5) -> str:
    """'' when two tables hold the same rows (numbers within ``rtol``, NaN equal to NaN), else the first difference."""
    if list(mine.columns) != list(theirs.columns):
        return f"columns differ: {sorted(set(mine.columns) ^ set(theirs.columns)) or 'their order'}"
    if len(mine) != len(theirs):
        return f"{len(mine)} rows against {len(theirs)}"
    for column in mine.columns:
        left, right = mine[column], theirs[column]
        if pd.api.types.is_numeric_dtype(left) and pd.api.types.is_numeric_dtype(right):
            same = np.isclose(left.to_numpy(float), right.to_numpy(float), rtol=rtol, atol=0, equal_nan=True)
        else:
            same = left.fillna("").astype(str).to_numpy() == right.fillna("").astype(str).to_numpy()
        if not same.all():
            at = int(np.flatnonzero(~same)[0])
            return f"row {at}, column {column}: {left.iloc[at]} against {right.iloc[at]}"
    return ""


def compare_tables(written: list[Path], tables_dir: Path) -> None:
    """One line naming the first table and cell where the re-derived tables leave ``tables_dir``'s."""
    for path in written:
        committed = Path(tables_dir) / path.name
        if not committed.is_file():
            raise DraftcountError(f"no table {committed} to compare with")
        difference = first_difference(pd.read_csv(path), pd.read_csv(committed))
        if difference:
            raise DraftcountError(f"{path.name} re-derived differs from {committed}: {difference}")


def run(args: argparse.Namespace) -> int:
    written = rederive_tables(args.records, args.out_dir)
    if args.compare:
        compare_tables(written, args.compare)
    print("wrote " + ", ".join(map(str, written)) + (f"; both equal {args.compare}'s" if args.compare else ""))
    return 0
