"""Aggregation of raw records into per (method, dataset, temperature) figures.

Speedups are paired: for every turn the method's tokens/s over `ar`'s on the
same prompt in the same run (their geometric mean; ``harness.analysis.timing``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from harness.store.atomic import atomic_path
from harness.analysis.metrics import USEFUL_DRAFTER_FLOPS, summary_columns
from harness.analysis.specbench import accept_lengths
from harness.store.records import read_records
from harness.analysis.timing import (geometric_mean, paired_ratios, paired_speedup, phase_columns, phase_summary,
                                     specbench_speedup)


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
                "verifier": record.get("verifier", "token_level"), "sample": record.get("sample", 0),
                "prompt_id": record.get("prompt_id", record["pair_id"].split("#")[0]),
                "category": record.get("category") or "", "repeat": record.get("repeat", 0),
                "new_tokens": counters["new_tokens"], "wall_seconds": counters["wall_seconds"],
                "output_key": hash(tuple(record.get("output_ids") or ())),
                **phase_columns(counters),
                "target_forwards": counters["target"]["forwards"], "accepted_tokens": counters["accepted_tokens"],
                "drafted_tokens": counters["drafted_tokens"], "verify_steps": len(counters["step_accepted"]),
                "accept_length_sum": sum(accept_lengths(counters["step_accepted"], counters["new_tokens"])),
                "drafter_flops": counters["drafter"]["flops"],
                "drafter_forwards": counters["drafter"]["forwards"], "target_flops": counters["target"]["flops"],
                "verify_tokens": counters["target"]["tokens"] - record["prompt_tokens"],
                "drafter_useful_flops": counters.get("extra", {}).get(USEFUL_DRAFTER_FLOPS, 0.0),
                "target_tokens": counters["target"]["tokens"],
                "accepted_by_depth": counters.get("accepted_by_depth", []),
                "extra": counters.get("extra", {}), "trace": counters.get("trace", {}),
                "expert_names": (record.get("method_details") or {}).get("experts", []),
                "drafter_parameters": drafter_parameters(record),
                "draft_vocab": float((record.get("method_details") or {}).get("draft_vocab") or 0),
                "drafter_data": (record.get("models") or {}).get("drafter_data") or "",
                "options": json.dumps({**record.get("method_options", {}),
                                       "drafter": (record.get("models") or {}).get("drafter")}, sort_keys=True),
                "details": json.dumps(record.get("method_details") or {}, sort_keys=True),
            })
    return pd.DataFrame(rows)


def drafter_parameters(record: dict) -> float:
    """The parameters of a record's drafter: its trained drafter's (``method_details``), else its draft LM's, else
    0 (a model-free method, `ar`)."""
    details = record.get("method_details") or {}
    if details.get("drafter_parameters"):
        return float(details["drafter_parameters"])
    return float((record.get("models") or {}).get("draft_parameters") or 0)


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per variant x dataset x temperature: tokens/s, tau (EAGLE/Spec-Bench: mean accepted length per decoding
    step, prefill excluded), tokens per target forward, accepted drafts per step (no bonus token), token
    waste, drafter-FLOP waste, drafter FLOPs (all and wasted) per accepted token, verify waste (verified
    tokens that were neither accepted drafts nor roots), FLOPs per emitted token, the paired speedup over
    `ar` (geometric mean of per-turn ratios with a prompt-bootstrap 95% interval, ratio of totals, and
    Spec-Bench's ratio of mean per-prompt tokens/s), efficiency (paired speedup / tokens per target forward),
    time per token by phase and the overhead-free bound (``harness.analysis.metrics`` defines each column)."""
    methods = frame[frame.role == "method"]
    baseline = frame[frame.role == "baseline"].set_index(["run", "pair_id"])
    rows = []
    for (variant, method, dataset, temperature), group in methods.groupby(
            ["variant", "method", "dataset", "temperature"]):
        row = {
            "variant": variant, "method": method, "dataset": dataset, "temperature": temperature,
            "verifier": group.verifier.iloc[0], "turns": len(group),
            "tokens_per_s": group.new_tokens.sum() / group.wall_seconds.sum(),
            "tau": tau(group),
            "tokens_per_forward": group.new_tokens.sum() / group.target_forwards.sum(),
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
        row["drafter_flops_per_step"] = drafter_flops / max(group.verify_steps.sum(), 1)
        row["drafter_flops_per_draft"] = drafter_flops / group.drafted_tokens.sum() if group.drafted_tokens.sum() \
            else np.nan
        row["drafter_forwards_per_step"] = group.drafter_forwards.sum() / max(group.verify_steps.sum(), 1)
        row["drafter_forwards_per_token"] = group.drafter_forwards.sum() / group.new_tokens.sum()
        row["drafter_parameters"] = group.drafter_parameters.max()
        row["draft_vocab"] = group.draft_vocab.max()
        row["drafter_data"] = group.drafter_data.iloc[0]
        row["verified_per_step"] = verified / max(group.verify_steps.sum(), 1)
        row.update(compute_breakdown(group))
        row["options"] = group.options.iloc[0]
        paired = paired_with_ar(group, baseline)
        row.update(phase_summary(group, paired))
        row["repeats"] = group.repeat.nunique()
        row["diverged_turns"] = (int((paired.output_key != paired.output_key_ar).sum())
                                 if temperature == 0 and "output_key_ar" in paired else np.nan)
        if len(paired):
            row.update(paired_speedup(paired))
            row["speedup_repeat_std"] = repeat_spread(paired)
            row["speedup_specbench"] = specbench_speedup(paired)
        elif method == "ar":  # the `ar` variant itself (the A/A control is paired like any other)
            for column in ("speedup_paired_mean", "speedup_total", "speedup_ci_low", "speedup_ci_high",
                           "speedup_specbench"):
                row[column] = 1.0
        if "speedup_paired_mean" in row:
            row["efficiency"] = row["speedup_paired_mean"] / row["tokens_per_forward"]
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=summary_columns())


def tau(turns: pd.DataFrame) -> float:
    """Mean accepted length per decoding step (EAGLE/Spec-Bench): the turns' accept lengths (``accepted + 1``
    per verification step, the last step cut at the turn's end, no prefill entry) over their verification
    steps; Spec-Bench's "mean accepted tokens" of the same turns exported. NaN without a verification step."""
    steps = turns.verify_steps.sum()
    return float(turns.accept_length_sum.sum() / steps) if steps else np.nan


def repeat_spread(paired: pd.DataFrame) -> float:
    """Standard deviation over repeats (bench.repeats) of each repeat's paired speedup; NaN with one repeat."""
    if paired.repeat.nunique() < 2:
        return np.nan
    return float(np.std([geometric_mean(paired_ratios(turns).to_numpy())
                         for _, turns in paired.groupby("repeat")], ddof=1))


def paired_with_ar(group: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """The method's turns joined with their paired `ar` turns (``baseline`` indexed by run and pair id)."""
    columns = [column for column in ("new_tokens", "wall_seconds", "phase_host", "output_key") if column in baseline]
    paired = group.join(baseline[columns], on=["run", "pair_id"], rsuffix="_ar")
    return paired.dropna(subset=["wall_seconds_ar"])


SAMPLE_COLUMNS = ["variant", "method", "dataset", "temperature", "sample", "turns", "tau", "speedup_paired_mean"]


def sample_table(frame: pd.DataFrame) -> pd.DataFrame:
    """For variants run with several samples per prompt (``run --samples``): per variant x dataset x temperature x
    sample index, tau and the paired speedup of that sample index, to see a method that learns across one
    prompt's samples (stand) improve with the index."""
    methods = frame[frame.role == "method"]
    baseline = frame[frame.role == "baseline"].set_index(["run", "pair_id"])
    rows = []
    for (variant, method, dataset, temperature), group in methods.groupby(
            ["variant", "method", "dataset", "temperature"]):
        if group["sample"].max() == 0:
            continue
        for sample, turns in group.groupby("sample"):
            paired = paired_with_ar(turns, baseline)
            rows.append({"variant": variant, "method": method, "dataset": dataset, "temperature": temperature,
                         "sample": int(sample), "turns": len(turns),
                         "tau": tau(turns),
                         "speedup_paired_mean": geometric_mean(paired_ratios(paired).to_numpy())
                         if len(paired) else np.nan})
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


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
