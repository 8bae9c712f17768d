"""The analysis commands that read tables with pandas (``learning-curves``, ``lr-study``, ``claims``,
``drafting-table``): their parsers,
and handlers that import the analysis only when one of them runs, so that every other ``python -m harness``
command (a benchmark run, a training job: most of a workflow's jobs) starts without importing pandas."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    curves = subparsers.add_parser("learning-curves", help="the learning-curve table, its ranking stability and "
                                                           "figure from drafters' training metrics")
    curves.add_argument("--metrics", nargs="+", type=Path,
                        help="training metrics files work/metrics/drafter-<name>.json")
    curves.add_argument("--rungs", help="DRAFTER=FAMILY:RUNG,... (rung: the budget over the main one)")
    curves.add_argument("--out", type=Path,
                        help="the table (CSV); the stability table and the fitted lines are written beside it "
                             "(<stem>_stability.csv, <stem>_fit.csv)")
    curves.add_argument("--table", type=Path,
                        help="instead: redraw --figure from this written table (and <stem>_stability.csv beside it)")
    curves.add_argument("--figure", type=Path, help="the figure's path without suffix (PDF and PNG)")
    curves.add_argument("--chains", default="", help="DRAFTER=VARIANT,...: each rung's chain run (bench variant)")
    curves.add_argument("--draft-lm", default="",
                        help="NAME=RUNG,...: the draft LM's rungs (their metrics work/metrics/<name>.json in --metrics)")
    curves.add_argument("--calibrated", default="",
                        help="DRAFTER=VARIANT,...: each rung's run at its calibrated shape (bench variant)")
    curves.add_argument("--calibrated-dataset", help="the prompt set of the --calibrated runs")
    curves.add_argument("--records", nargs="*", default=[], type=Path,
                        help="the chain and calibrated runs' raw records (results/raw/<variant>/<dataset>-t<T>.jsonl)")
    lr = subparsers.add_parser("lr-study", help="the learning-rate study's table from drafters' training metrics: "
                                                "each family's rate of highest held-out agreement")
    lr.add_argument("--metrics", nargs="+", required=True, type=Path,
                    help="training metrics files work/metrics/drafter-<name>.json")
    lr.add_argument("--rates", required=True, help="DRAFTER=FAMILY:LR,...")
    lr.add_argument("--out", required=True, type=Path, help="the table (CSV)")
    drafting = subparsers.add_parser("drafting-table", help="the drafting study's table: each chain at T > 0 by "
                                                            "top-k and by sampled drafts, side by side")
    drafting.add_argument("records", nargs="+", type=Path,
                          help="the study's raw records (results/raw/<family>_chain_{topk,sampled}/...) and the main "
                               "variants' on the same sets (the convention each drafts by)")
    drafting.add_argument("--out", required=True, type=Path, help="the table (CSV)")
    claims = subparsers.add_parser("claims", help="the summary and the paper's-claims tables re-derived from "
                                                  "(published) records alone")
    claims.add_argument("records", nargs="+", type=Path,
                        help="records files: results/<target>/records/*/*.jsonl.gz (or raw .jsonl)")
    claims.add_argument("--out-dir", required=True, type=Path, help="where to write summary.csv and claims.csv")
    claims.add_argument("--compare", type=Path,
                        help="a tables folder (results/<target>/tables): stop with one line where they differ")


def _learning_curves(args: argparse.Namespace) -> int | None:
    from harness.analysis import learning_curves

    return learning_curves.run(args)


def _lr_study(args: argparse.Namespace) -> int | None:
    from harness.analysis import lr_study

    return lr_study.run_lr(args)


def _claims(args: argparse.Namespace) -> int | None:
    from harness.analysis import published

    return published.run(args)


def _drafting_table(args: argparse.Namespace) -> int | None:
    from harness.analysis import drafting

    return drafting.run(args)


HANDLERS = {"learning-curves": _learning_curves, "lr-study": _lr_study, "claims": _claims,
            "drafting-table": _drafting_table}
