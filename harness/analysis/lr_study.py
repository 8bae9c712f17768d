"""The learning-rate study (study `lr`, rule lr_study): each family's drafter at several learning rates at its main
budget, read from the drafters' training metrics as the learning curves read them
(``harness.analysis.learning_curves``); the rate of highest mean held-out agreement over the same draft steps for
every family chosen (never the benchmark prompts). Torch-free.

    python -m harness lr-study --metrics work/metrics/drafter-*.json --rates eagle=eagle:0.003,... --out lr.csv
"""

from __future__ import annotations

import argparse

import pandas as pd

from harness.analysis.learning_curves import curve_rows, parse_rungs, read_metrics
from harness.analysis.summary import write_table

LR_COLUMNS = ["family", "drafter", "lr", "tokens", "agreement_step1", "agreement_mean", "agreement_steps", "chosen",
              "agreement_by_step"]


def lr_rows(metrics: dict[str, dict], rates: dict[str, tuple[str, float]]) -> pd.DataFrame:
    """The lr study: one row per drafter (``rates`` {drafter: (family, learning rate)}), the rate of highest mean
    held-out agreement over the same draft steps for every family (``shared_steps``: the first three, or as many as
    the family recording fewest records) chosen per family (ties: the smaller rate)."""
    curves = curve_rows(metrics, rates).rename(columns={"rung": "lr"})
    curves["chosen"] = False
    for _, rows in curves.groupby("family"):
        best = rows.sort_values(["agreement_mean", "lr"], ascending=[False, True]).index[0]
        curves.loc[best, "chosen"] = True
    return curves[LR_COLUMNS]


def stale_rates(table: pd.DataFrame, drafters: dict[str, dict]) -> list[str]:
    """One line per family whose rate the lr study's written ``table`` chose differs from the rate its `drafters`
    entry trains at (the config then no longer follows the study, or the study ran at another metric)."""
    lines = []
    for family, chosen in table[table.chosen.astype(bool)].groupby("family").lr.first().items():
        own = drafters.get(family, {}).get("options", {}).get("lr")
        if own is not None and float(own) != float(chosen):
            lines.append(f"family {family!r} trains at lr {own}, the lr study chose {chosen:g}")
    return lines


def run_lr(args: argparse.Namespace) -> int:
    table = lr_rows(read_metrics(args.metrics), parse_rungs(args.rates, "--rates", "LR"))
    write_table(table, args.out)
    print(table.to_string(index=False))
    return 0
