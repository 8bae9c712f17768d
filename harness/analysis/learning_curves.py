"""Learning curves (study `learning_curves`): every model-based drafter family retrained at fractions and multiples
of the main comparison's budget of supervised target positions, read from the drafters' training metrics; and the
learning-rate study (study `lr`, ``lr_rows``): each family at several learning rates at the main budget, the rate of
highest held-out agreement chosen (never the benchmark prompts). Per
drafter: its family, the rung (its budget over the family's main budget), the positions and training FLOPs the kit
counted, and its held-out top-1 agreement per draft step (the kit's contract, docs/extending.md). The ranking's
stability from rung to rung is Kendall's tau between adjacent rungs' orders of the families (by step-1 agreement).

No benchmark run is needed: these are the drafters' held-out figures, not tau or speedup (the study trains; the
bench runs the main rung). Torch-free.

    python -m harness learning-curves --metrics work/metrics/drafter-*.json \
        --rungs eagle=eagle:1,eagle_lc05=eagle:0.5,... --out results/studies/tables/learning_curves.csv \
        --figure results/studies/figures/learning_curves
"""

from __future__ import annotations

import argparse
import json
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.summary import write_table
from harness.errors import DraftcountError

AGREEMENT = "heldout_top1_agreement_by_step"  # harness.training.drafters.AGREEMENT (torch-free here)
COLUMNS = ["family", "drafter", "rung", "tokens", "flops", "agreement_step1", "agreement_mean3", "agreement_by_step"]
STABILITY_COLUMNS = ["rung", "next_rung", "families", "kendall_tau"]


def curve_rows(metrics: dict[str, dict], rungs: dict[str, tuple[str, float]]) -> pd.DataFrame:
    """One row per drafter: ``metrics`` {drafter: its training metrics}, ``rungs`` {drafter: (family, rung)}."""
    rows = []
    for drafter, (family, rung) in rungs.items():
        if drafter not in metrics:
            raise DraftcountError(f"learning curves: no metrics for drafter {drafter!r}")
        found = metrics[drafter]
        agreement = [float(value) for value in found.get(AGREEMENT) or []]
        if not agreement:
            raise DraftcountError(f"learning curves: drafter {drafter!r} recorded no {AGREEMENT} (train it with "
                                  f"--heldout)")
        train = found.get("train") or {}
        rows.append({"family": family, "drafter": drafter, "rung": rung, "tokens": train.get("tokens", np.nan),
                     "flops": train.get("flops", np.nan), "agreement_step1": agreement[0],
                     "agreement_mean3": float(np.mean(agreement[:3])), "agreement_by_step": json.dumps(agreement)})
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["family", "rung"], ignore_index=True)


def kendall_tau(first: list[float], second: list[float]) -> float:
    """Kendall's tau-b of two scorings of the same items (1: the same order, -1: reversed; ties count neither)."""
    concordant = discordant = ties_first = ties_second = 0
    for i, j in combinations(range(len(first)), 2):
        a, b = np.sign(first[i] - first[j]), np.sign(second[i] - second[j])
        if a == 0 and b == 0:
            continue
        if a == 0:
            ties_first += 1
        elif b == 0:
            ties_second += 1
        elif a == b:
            concordant += 1
        else:
            discordant += 1
    denominator = np.sqrt((concordant + discordant + ties_first) * (concordant + discordant + ties_second))
    return float((concordant - discordant) / denominator) if denominator else float("nan")


def ranking_stability(curves: pd.DataFrame, column: str = "agreement_step1") -> pd.DataFrame:
    """Kendall's tau between the families' orders at each pair of adjacent rungs (families present at both)."""
    rungs = sorted(curves.rung.unique())
    rows = []
    for rung, following in zip(rungs, rungs[1:]):
        here = curves[curves.rung == rung].set_index("family")[column]
        there = curves[curves.rung == following].set_index("family")[column]
        shared = sorted(set(here.index) & set(there.index))
        rows.append({"rung": rung, "next_rung": following, "families": len(shared),
                     "kendall_tau": kendall_tau(list(here[shared]), list(there[shared])) if len(shared) > 1
                     else np.nan})
    return pd.DataFrame(rows, columns=STABILITY_COLUMNS)


def plot_learning_curves(curves: pd.DataFrame, stability: pd.DataFrame):
    """Held-out agreement (step 1, and the mean of steps 1-3) against training positions, log x, one line per
    family; beside them Kendall's tau between adjacent rungs."""
    from harness.analysis.plotting import plt

    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for family, rows in curves.groupby("family"):
        rows = rows.sort_values("tokens")
        for axis, column in zip(axes[:2], ("agreement_step1", "agreement_mean3")):
            axis.plot(rows.tokens, rows[column], marker="o", label=family)
    from matplotlib.ticker import NullFormatter

    for axis, title in zip(axes[:2], ("held-out agreement, draft step 1", "held-out agreement, steps 1-3 (mean)")):
        axis.set_xscale("log")
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlabel("supervised target positions")
        axis.set_title(title)
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize="small")
    labels = [f"{row.rung:g}x -> {row.next_rung:g}x" for row in stability.itertuples()]
    axes[2].bar(range(len(labels)), stability.kendall_tau, color="0.5")
    axes[2].set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    axes[2].set_ylim(-1, 1)
    axes[2].axhline(0, color="0.3", linewidth=0.5)
    axes[2].set_title("ranking stability (Kendall's tau)")
    axes[2].set_xlabel("budget rungs (x the main budget)")
    figure.tight_layout()
    return figure


def parse_rungs(text: str, flag: str = "--rungs", value: str = "RUNG") -> dict[str, tuple[str, float]]:
    """``drafter=family:number,...`` -> {drafter: (family, number)}; one line on a bad entry."""
    rungs = {}
    for item in filter(None, text.split(",")):
        drafter, _, rest = item.partition("=")
        family, _, number = rest.partition(":")
        try:
            rungs[drafter.strip()] = (family.strip(), float(number))
        except ValueError:
            raise DraftcountError(f"{flag} wants DRAFTER=FAMILY:{value} entries, got {item!r}") from None
        if not drafter.strip() or not family.strip():
            raise DraftcountError(f"{flag} wants DRAFTER=FAMILY:{value} entries, got {item!r}")
    return rungs


def read_metrics(paths: list[Path]) -> dict[str, dict]:
    """{drafter: its training metrics} from work/metrics/drafter-<name>.json files."""
    metrics = {}
    for path in paths:
        if not path.is_file():
            raise DraftcountError(f"no metrics file {path}")
        metrics[path.stem.removeprefix("drafter-")] = json.loads(path.read_text())
    return metrics


def run(args: argparse.Namespace) -> int:
    curves = curve_rows(read_metrics(args.metrics), parse_rungs(args.rungs))
    stability = ranking_stability(curves)
    write_table(curves, args.out)
    write_table(stability, args.out.with_name(f"{args.out.stem}_stability.csv"))
    print(curves.drop(columns="agreement_by_step").to_string(index=False))
    print(stability.to_string(index=False))
    if args.figure:
        from harness.analysis.plotting import save_figure

        save_figure(plot_learning_curves(curves, stability), args.figure.parent, args.figure.name)
    return 0


LR_COLUMNS = ["family", "drafter", "lr", "tokens", "agreement_step1", "agreement_mean3", "chosen"]


def lr_rows(metrics: dict[str, dict], rates: dict[str, tuple[str, float]]) -> pd.DataFrame:
    """The lr study: one row per drafter (``rates`` {drafter: (family, learning rate)}), the rate of highest mean
    held-out agreement over the first three draft steps chosen per family (ties: the smaller rate)."""
    curves = curve_rows(metrics, rates).rename(columns={"rung": "lr"})
    curves["chosen"] = False
    for _, rows in curves.groupby("family"):
        best = rows.sort_values(["agreement_mean3", "lr"], ascending=[False, True]).index[0]
        curves.loc[best, "chosen"] = True
    return curves[LR_COLUMNS]


def run_lr(args: argparse.Namespace) -> int:
    table = lr_rows(read_metrics(args.metrics), parse_rungs(args.rates, "--rates", "LR"))
    write_table(table, args.out)
    print(table.to_string(index=False))
    return 0


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    curves = subparsers.add_parser("learning-curves", help="the learning-curve table, its ranking stability and "
                                                           "figure from drafters' training metrics")
    curves.add_argument("--metrics", nargs="+", required=True, type=Path,
                        help="training metrics files work/metrics/drafter-<name>.json")
    curves.add_argument("--rungs", required=True, help="DRAFTER=FAMILY:RUNG,... (rung: the budget over the main one)")
    curves.add_argument("--out", required=True, type=Path,
                        help="the table (CSV); the stability table is written beside it (<stem>_stability.csv)")
    curves.add_argument("--figure", type=Path, help="the figure's path without suffix (PDF and PNG)")


    lr = subparsers.add_parser("lr-study", help="the learning-rate study's table from drafters' training metrics: "
                                                "each family's rate of highest held-out agreement")
    lr.add_argument("--metrics", nargs="+", required=True, type=Path,
                    help="training metrics files work/metrics/drafter-<name>.json")
    lr.add_argument("--rates", required=True, help="DRAFTER=FAMILY:LR,...")
    lr.add_argument("--out", required=True, type=Path, help="the table (CSV)")


HANDLERS = {"learning-curves": run, "lr-study": run_lr}
