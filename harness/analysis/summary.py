"""Aggregation of raw records into per (method, dataset, temperature) figures.

Speedups are paired: for every turn the method's tokens/s over `ar`'s on the
same prompt in the same run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from harness.store.atomic import atomic_path
from harness.analysis.metrics import USEFUL_DRAFTER_FLOPS, summary_columns
from harness.store.records import read_records


def records_frame(paths: list[Path]) -> pd.DataFrame:
    rows = []
    for path in paths:
        for record in read_records(path):
            counters = record["counters"]
            rows.append({
                "run": str(path), "method": record["method"], "variant": record.get("variant", record["method"]),
                "role": record["role"],
                "compared_method": record["compared_method"], "dataset": record["dataset"],
                "temperature": record["sampling"]["temperature"], "pair_id": record["pair_id"],
                "new_tokens": counters["new_tokens"], "wall_seconds": counters["wall_seconds"],
                "target_forwards": counters["target"]["forwards"], "accepted_tokens": counters["accepted_tokens"],
                "drafted_tokens": counters["drafted_tokens"], "verify_steps": len(counters["step_accepted"]),
                "drafter_flops": counters["drafter"]["flops"], "target_flops": counters["target"]["flops"],
                "verify_tokens": counters["target"]["tokens"] - record["prompt_tokens"],
                "drafter_useful_flops": counters.get("extra", {}).get(USEFUL_DRAFTER_FLOPS, 0.0),
                "target_tokens": counters["target"]["tokens"],
                "accepted_by_depth": counters.get("accepted_by_depth", []),
                "options": json.dumps({**record.get("method_options", {}),
                                       "drafter": (record.get("models") or {}).get("drafter")}, sort_keys=True),
            })
    return pd.DataFrame(rows)


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant x dataset x temperature: tokens/s, tau (with and without the bonus token), token
    waste, drafter-FLOP waste, drafter FLOPs (all and wasted) per accepted token, verify waste (verified
    tokens that were neither accepted drafts nor roots), FLOPs per emitted token, the paired speedup over
    `ar` (mean of per-prompt ratios with a bootstrap 95% interval, and ratio of totals) and efficiency
    (paired speedup / tau)."""
    methods = frame[frame.role == "method"]
    baseline = frame[frame.role == "baseline"].set_index(["run", "pair_id"])
    rows = []
    for (variant, method, dataset, temperature), group in methods.groupby(
            ["variant", "method", "dataset", "temperature"]):
        row = {
            "variant": variant, "method": method, "dataset": dataset, "temperature": temperature,
            "turns": len(group),
            "tokens_per_s": group.new_tokens.sum() / group.wall_seconds.sum(),
            "tau": group.new_tokens.sum() / group.target_forwards.sum(),
            "accepted_per_step": group.accepted_tokens.sum() / max(group.verify_steps.sum(), 1),
            "token_waste": 1 - group.accepted_tokens.sum() / group.drafted_tokens.sum()
            if group.drafted_tokens.sum() else 0.0,
        }
        drafter_flops = group.drafter_flops.sum()
        row["drafter_flop_waste"] = 1 - group.drafter_useful_flops.sum() / drafter_flops if drafter_flops else 0.0
        row["drafter_flops_per_accepted"] = drafter_flops / max(group.accepted_tokens.sum(), 1)
        row["drafter_wasted_flops_per_accepted"] = ((drafter_flops - group.drafter_useful_flops.sum())
                                                    / max(group.accepted_tokens.sum(), 1))
        verified = group.verify_tokens.sum()
        row["verify_waste"] = 1 - (group.accepted_tokens.sum() + group.verify_steps.sum()) / verified if verified else 0.0
        row["flops_per_token"] = (group.target_flops.sum() + drafter_flops) / group.new_tokens.sum()
        row["verified_per_step"] = verified / max(group.verify_steps.sum(), 1)
        row.update(compute_breakdown(group))
        row["options"] = group.options.iloc[0]
        paired = group.join(baseline[["new_tokens", "wall_seconds"]], on=["run", "pair_id"], rsuffix="_ar")
        paired = paired.dropna(subset=["wall_seconds_ar"])
        if method == "ar":
            row["speedup_paired_mean"] = row["speedup_total"] = row["speedup_ci_low"] = row["speedup_ci_high"] = 1.0
        elif len(paired):
            ratio = (paired.new_tokens / paired.wall_seconds) / (paired.new_tokens_ar / paired.wall_seconds_ar)
            row["speedup_paired_mean"] = float(ratio.mean())
            row["speedup_ci_low"], row["speedup_ci_high"] = bootstrap_interval(ratio.to_numpy())
            row["speedup_total"] = float((paired.new_tokens.sum() / paired.wall_seconds.sum())
                                         / (paired.new_tokens_ar.sum() / paired.wall_seconds_ar.sum()))
        if "speedup_paired_mean" in row:
            row["efficiency"] = row["speedup_paired_mean"] / row["tau"]
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=summary_columns())


def compute_breakdown(group: pd.DataFrame) -> dict[str, float]:
    """FLOPs per emitted token split into the drafter's useful and wasted work and the verifier's.

    Verifier FLOPs exclude the prefill (the share of the target's FLOPs on prompt tokens, by token count)
    and split between useful (accepted drafts and roots) and wasted (rejected nodes) by token count."""
    emitted = group.new_tokens.sum()
    drafter, drafter_useful = group.drafter_flops.sum(), group.drafter_useful_flops.sum()
    verified = group.verify_tokens.sum()
    verify_flops = group.target_flops.sum() * verified / max(group.target_tokens.sum(), 1)
    useful_share = (group.accepted_tokens.sum() + group.verify_steps.sum()) / verified if verified else 1.0
    return {
        "drafter_useful_flops_per_token": drafter_useful / emitted,
        "drafter_wasted_flops_per_token": (drafter - drafter_useful) / emitted,
        "verify_useful_flops_per_token": verify_flops * useful_share / emitted,
        "verify_wasted_flops_per_token": verify_flops * (1 - useful_share) / emitted,
    }


def depth_acceptance(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant x dataset x temperature x draft depth d (1 = the first drafted token): how many
    verification steps reached depth d - 1, how many accepted a token at depth d, and the conditional
    acceptance rate (their ratio)."""
    methods = frame[(frame.role == "method") & (frame.drafted_tokens > 0)]
    rows = []
    for (variant, method, dataset, temperature), group in methods.groupby(
            ["variant", "method", "dataset", "temperature"]):
        depth = max((len(counts) for counts in group.accepted_by_depth), default=0)
        accepted = np.zeros(depth + 1)
        for counts in group.accepted_by_depth:
            accepted[1:len(counts) + 1] += counts
        accepted[0] = group.verify_steps.sum()
        for level in range(1, depth + 1):
            rows.append({"variant": variant, "method": method, "dataset": dataset, "temperature": temperature,
                         "depth": level, "reached": int(accepted[level - 1]), "accepted": int(accepted[level]),
                         "rate": accepted[level] / accepted[level - 1] if accepted[level - 1] else 0.0})
    return pd.DataFrame(rows, columns=["variant", "method", "dataset", "temperature", "depth", "reached",
                                       "accepted", "rate"])


def bootstrap_interval(values: np.ndarray, confidence: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (fixed seed: the same table every time)."""
    generator = np.random.default_rng(seed)
    means = generator.choice(values, size=(resamples, len(values)), replace=True).mean(axis=1)
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def write_table(table: pd.DataFrame, out: Path) -> None:
    with atomic_path(out) as partial:
        table.to_csv(partial, index=False, float_format="%.6g")


def write_summary(paths: list[Path], out: Path, depth_out: Path | None = None) -> pd.DataFrame:
    """The summary table (and, with ``depth_out``, the per-depth acceptance table) of records files."""
    frame = records_frame(paths)
    table = summarize(frame)
    write_table(table, out)
    if depth_out is not None:
        write_table(depth_acceptance(frame), depth_out)
    return table
