"""Polybasic's view, its cost rule: does inserting the mid model between the target and the draft LM pay? (The
report's section *Polybasic: does the mid model pay?* and ``tables/polybasic_cost_rule.csv``; read by
``harness.analysis.views`` without importing the method's code: torch-free, as every view.)

The paper's model (Wang et al. 2025, Lemma 3.1) is T = sum_i F_i T_i: generation time is the sum over the chain's
models of forwards F_i times seconds per forward T_i. Per emitted token:

- `ar`: T_ar (one target forward per token);
- `sd` (target <- small, gamma drafts a step, accept length L_sd): (T_1 + gamma T_small) / L_sd;
- `polybasic` (target <- mid <- small, a block of K mid tokens a step, outer accept length L_1; the inner loop
  makes L_in mid tokens per mid forward, with gamma_inner small forwards each): a step needs K / L_in inner
  rounds, so (T_1 + (K / L_in) (T_mid + gamma_inner T_small)) / L_1. In the paper's form the mid model's
  accept length (emitted tokens per mid forward) is L_2 = L_1 L_in / K.

The insertion condition (Theorem 3.2, in the form the model gives it): the mid model pays iff the predicted time
per token with it is below the one without it. Everything is measured in the run itself: T_i as seconds per
forward (each method's own target verify forwards, whose width differs from `ar`'s; the mid and small stages'
seconds and forwards from polybasic's counters; sd's drafter seconds per forward), the accept lengths as tau
(``harness.analysis.summary.tau``) and polybasic's inner counters. The measured paired speedups
(``speedup_paired_mean``) stand beside the prediction.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from harness.analysis.summary import summarize
from harness.analysis.tables import cell, markdown_table
from harness.analysis.view import Inputs, Scope, View

EXTRA = "polybasic_"  # the prefix of polybasic's counters (``methods.polybasic``)


@dataclass(frozen=True)
class ChainMeasurements:
    """Seconds per forward and accept lengths of one dataset and temperature."""

    t_ar: float  # target seconds per forward under `ar` (one token)
    t_target_sd: float  # target seconds per verify forward under `sd` (1 + gamma tokens)
    t_small_sd: float  # draft-LM seconds per forward under `sd`
    gamma: int
    l_sd: float  # sd's tau
    t_target_poly: float  # target seconds per verify forward under `polybasic` (1 + block tokens)
    t_mid: float
    t_small_poly: float
    block: int
    gamma_inner: int
    l_outer: float  # polybasic's tau (target <- mid)
    l_inner: float  # mid tokens per mid forward (mid <- small)


@dataclass(frozen=True)
class CostVerdict:
    sd_seconds_per_token: float
    polybasic_seconds_per_token: float
    predicted_sd_speedup: float
    predicted_polybasic_speedup: float
    mid_accept_length: float  # the paper's L_2: emitted tokens per mid forward
    insert_mid: bool


def sd_seconds_per_token(t_target: float, t_small: float, gamma: int, accept_length: float) -> float:
    """Two-model chain: one target forward and ``gamma`` draft forwards per step of ``accept_length`` tokens."""
    return (t_target + gamma * t_small) / accept_length


def polybasic_seconds_per_token(t_target: float, t_mid: float, t_small: float, block: int, gamma_inner: int,
                                outer_length: float, inner_length: float) -> float:
    """Three-model chain: per step one target forward and ``block / inner_length`` inner rounds of one mid and
    ``gamma_inner`` small forwards, for ``outer_length`` tokens."""
    rounds = block / inner_length
    return (t_target + rounds * (t_mid + gamma_inner * t_small)) / outer_length


COST_RULE_COLUMNS = ["dataset", "temperature", *ChainMeasurements.__dataclass_fields__,
                     *CostVerdict.__dataclass_fields__, "measured_sd_speedup", "measured_polybasic_speedup"]


def cost_rule(m: ChainMeasurements) -> CostVerdict:
    """The predicted time per token of sd and polybasic, their speedups over `ar`, and whether the mid pays."""
    sd = sd_seconds_per_token(m.t_target_sd, m.t_small_sd, m.gamma, m.l_sd)
    poly = polybasic_seconds_per_token(m.t_target_poly, m.t_mid, m.t_small_poly, m.block, m.gamma_inner,
                                       m.l_outer, m.l_inner)
    return CostVerdict(sd, poly, m.t_ar / sd, m.t_ar / poly, m.l_outer * m.l_inner / m.block, bool(poly < sd))


def _extra_sum(turns: pd.DataFrame, name: str) -> float:
    return float(sum(extra.get(EXTRA + name, 0.0) for extra in turns.extra))


def _option(turns: pd.DataFrame, name: str, default: int) -> int:
    value = json.loads(turns.options.iloc[0]).get(name)
    return int(default if value is None else value)


def stage_measurements(turns: pd.DataFrame) -> dict[str, float]:
    """Polybasic's turns: seconds per mid and per small forward, and the inner accept length."""
    rounds = _extra_sum(turns, "inner_rounds")
    return {
        "t_mid": _extra_sum(turns, "mid_seconds") / max(_extra_sum(turns, "mid_forwards"), 1),
        "t_small": _extra_sum(turns, "small_seconds") / max(_extra_sum(turns, "small_forwards"), 1),
        "l_inner": (_extra_sum(turns, "inner_accepted") + rounds) / rounds if rounds else np.nan,
    }


def ar_seconds_per_forward(turns: pd.DataFrame) -> float:
    """`ar`'s target seconds per decoding forward (its prefill forward excluded)."""
    forwards = (turns.target_forwards - 1).sum()
    return float(turns.phase_target.sum() / forwards) if forwards else np.nan


def cost_rule_table(frame: pd.DataFrame, summary: pd.DataFrame | None = None, sd_variant: str = "sd",
                    polybasic_variant: str = "polybasic") -> pd.DataFrame:
    """Per dataset and temperature where both variants ran: the measured inputs, the rule's predictions and
    verdict, and the measured speedups. ``frame``: ``harness.analysis.summary.records_frame``; ``summary``: its
    ``summarize`` (computed for the two variants when not given)."""
    if summary is None:
        chosen = frame.variant.isin([sd_variant, polybasic_variant]) | (frame.role == "baseline")
        summary = summarize(frame[chosen])
    rows = []
    by_variant = summary.set_index(["variant", "dataset", "temperature"])
    poly_turns = frame[(frame.role == "method") & (frame.variant == polybasic_variant)]
    for (dataset, temperature), turns in poly_turns.groupby(["dataset", "temperature"]):
        if (sd_variant, dataset, temperature) not in by_variant.index:
            continue
        sd_row = by_variant.loc[(sd_variant, dataset, temperature)]
        poly_row = by_variant.loc[(polybasic_variant, dataset, temperature)]
        sd_turns = frame[(frame.role == "method") & (frame.variant == sd_variant) & (frame.dataset == dataset)
                         & (frame.temperature == temperature)]
        baseline = frame[(frame.role == "baseline") & (frame.dataset == dataset) & (frame.temperature == temperature)]
        stages = stage_measurements(turns)
        measured = ChainMeasurements(
            t_ar=ar_seconds_per_forward(baseline), t_target_sd=sd_row.target_seconds_per_forward,
            t_small_sd=sd_row.drafter_seconds_per_forward, gamma=_option(sd_turns, "gamma", 4), l_sd=sd_row.tau,
            t_target_poly=poly_row.target_seconds_per_forward, t_mid=stages["t_mid"], t_small_poly=stages["t_small"],
            block=_option(turns, "block", 8), gamma_inner=_option(turns, "gamma_inner", 4), l_outer=poly_row.tau,
            l_inner=stages["l_inner"])
        verdict = cost_rule(measured)
        rows.append({"dataset": dataset, "temperature": temperature, **asdict(measured), **asdict(verdict),
                     "measured_sd_speedup": sd_row.get("speedup_paired_mean", np.nan),
                     "measured_polybasic_speedup": poly_row.get("speedup_paired_mean", np.nan)})
    return pd.DataFrame(rows, columns=COST_RULE_COLUMNS)


COST_RULE_INTRO = ("The paper's cost model T = sum_i F_i T_i from this run's measured seconds per forward and accept "
                   "lengths: sd costs (T_1 + gamma T_small) / L_sd per token, polybasic "
                   "(T_1 + (K / L_in)(T_mid + gamma_inner T_small)) / L_1 (L_2 = L_1 L_in / K: emitted tokens per "
                   "mid forward). The mid model is worth inserting iff polybasic's predicted time per token is below "
                   "sd's; the measured paired speedups over `ar` stand beside the prediction.")


def cost_rule_markdown(table: pd.DataFrame) -> str:
    """The cost-rule table (``cost_rule_table``) as markdown; empty when there is nothing to show."""
    if table.empty:
        return ""
    header = ["dataset", "T", "T_ar ms", "T_1 ms (sd / poly)", "T_mid ms", "T_small ms (sd / poly)", "L_sd",
              "L_1", "L_in", "L_2", "predicted sd", "predicted polybasic", "insert mid?", "measured sd",
              "measured polybasic"]
    rows = []
    for _, row in table.iterrows():
        measured_pays = row.measured_polybasic_speedup > row.measured_sd_speedup
        rows.append([
            str(row.dataset), f"{row.temperature:g}", cell(row.t_ar * 1e3, "{:.2f}"),
            f"{cell(row.t_target_sd * 1e3, '{:.2f}')} / {cell(row.t_target_poly * 1e3, '{:.2f}')}",
            cell(row.t_mid * 1e3, "{:.2f}"),
            f"{cell(row.t_small_sd * 1e3, '{:.2f}')} / {cell(row.t_small_poly * 1e3, '{:.2f}')}",
            cell(row.l_sd, "{:.2f}"), cell(row.l_outer, "{:.2f}"), cell(row.l_inner, "{:.2f}"),
            cell(row.mid_accept_length, "{:.2f}"), cell(row.predicted_sd_speedup, "{:.2f}x"),
            cell(row.predicted_polybasic_speedup, "{:.2f}x"), "yes" if row.insert_mid else "no",
            cell(row.measured_sd_speedup, "{:.2f}x"),
            cell(row.measured_polybasic_speedup, "{:.2f}x") + (" (pays)" if measured_pays else ""),
        ])
    return markdown_table(header, rows)


def _section(data: Inputs) -> str:
    return cost_rule_markdown(data.table("polybasic_cost_rule"))


def _runs_both(scope: Scope) -> bool:
    return scope.runs("polybasic") and scope.runs("sd")


VIEWS = (
    View("polybasic_cost_rule", applies=_runs_both, table=cost_rule_table, after="head_to_head",
         title="Polybasic: does the mid model pay?", intro=COST_RULE_INTRO, section=_section),
)
