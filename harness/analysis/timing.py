"""Time: the paired speedup over `ar`, where each variant's time goes (by phase), and its overhead-free bound.

Speedup. Each method turn runs beside an `ar` turn on the same prompt, in the same process, interleaved
(``harness.runner``). The per-turn ratio r = tokens/s(method) / tokens/s(ar) is noisy, and the arithmetic
mean of noisy ratios is biased upwards (E[X/Y] > 1 for independent, equally distributed X and Y): an A/A
comparison of two identical computations read 1.03-1.12 that way. The speedup is therefore the geometric mean
of the per-turn ratios, exp(mean(log r)), which an A/A comparison centres on 1; its 95% interval is a
percentile bootstrap that resamples prompts (a prompt's turns and samples stay together: the turns of one
prompt share its subject, length and history, so they are not independent draws, and resampling them one by
one would understate the spread). Two other summaries of the same turns are reported beside it: the ratio of
total tokens/s, and Spec-Bench's (``evaluation/speed.py``): the mean over prompts of the method's tokens/s (its
turns' tokens over their seconds) over the same mean for `ar` (``specbench_speedup``).

Phases (``harness.backend.phases``): seconds per emitted token in prefill, target verify forwards, drafter
forwards, verification and sampling, and host (the rest). The bound is the speedup the variant would reach if
neither it nor its paired `ar` spent anything on the host: ar's model-and-verification time per token over the
variant's (paired turns only).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from harness.store.records import PHASES

PHASE_COLUMNS = tuple(f"phase_{name}" for name in PHASES)
MODEL_PHASES = ("phase_prefill", "phase_target", "phase_drafter")


def phase_columns(counters: dict) -> dict[str, float]:
    """A record's phase seconds as frame columns (NaN when the record was not timed by phase)."""
    seconds = counters.get("phase_seconds") or {}
    return {column: float(seconds.get(name, np.nan)) for column, name in zip(PHASE_COLUMNS, PHASES)}


def paired_ratios(paired: pd.DataFrame) -> pd.Series:
    """Per turn: the method's tokens/s over its paired `ar` turn's."""
    return (paired.new_tokens / paired.wall_seconds) / (paired.new_tokens_ar / paired.wall_seconds_ar)


def geometric_mean(values: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(values))))


def prompt_bootstrap_interval(values: np.ndarray, clusters: np.ndarray, confidence: float = 0.95,
                              resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the geometric mean of ``values`` (positive ratios), resampling the
    ``clusters`` (prompt ids: a prompt's turns stay together) with replacement; fixed seed."""
    low, high = cluster_bootstrap({"log": np.log(values), "turns": np.ones(len(values))}, clusters,
                                  lambda sums: sums["log"] / sums["turns"], confidence, resamples, seed)
    return float(np.exp(low)), float(np.exp(high))


def cluster_bootstrap(columns: dict[str, np.ndarray], clusters: np.ndarray,
                      statistic: Callable[[dict[str, np.ndarray]], np.ndarray], confidence: float = 0.95,
                      resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` of the columns' sums, resampling ``clusters`` (a prompt's
    turns stay together) with replacement; fixed seed. ``statistic`` maps {column: resampled sums} (one value per
    resample) to the statistic per resample: a ratio of sums, a geometric mean (sums of logs over counts), ..."""
    keys, index = np.unique(clusters, return_inverse=True)
    draws = np.random.default_rng(seed).integers(0, len(keys), size=(resamples, len(keys)))
    sums = {name: np.bincount(index, weights=np.asarray(values, dtype=float), minlength=len(keys))[draws].sum(axis=1)
            for name, values in columns.items()}
    values = statistic(sums)
    tail = (1 - confidence) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


def leave_one_cluster_out(columns: dict[str, np.ndarray], clusters: np.ndarray,
                          statistic: Callable[[dict[str, np.ndarray]], np.ndarray], confidence: float = 0.95,
                          resamples: int = 2000, seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """{cluster: (the statistic, its interval's low and high end) without that cluster's turns}: the same
    ``cluster_bootstrap`` (same seed) over the others, one cluster left out at a time."""
    clusters = np.asarray(clusters)
    out = {}
    for key in np.unique(clusters):
        kept = clusters != key
        if not kept.any():
            continue
        rest = {name: np.asarray(values, dtype=float)[kept] for name, values in columns.items()}
        value = float(np.asarray(statistic({name: np.array([values.sum()]) for name, values in rest.items()}))[0])
        out[str(key)] = (value, *cluster_bootstrap(rest, clusters[kept], statistic, confidence, resamples, seed))
    return out


def specbench_speedup(paired: pd.DataFrame) -> float:
    """Spec-Bench's speedup (``evaluation/speed.py``) of paired turns: per prompt (an answer line) tokens/s =
    sum(new_tokens) / sum(wall_seconds) over its turns, for the method and for `ar`; the mean of the method's
    over the mean of ar's. Only the first sample of a prompt counts, as speed.py reads ``choices[0]``."""
    if "sample" in paired:
        paired = paired[paired["sample"] == 0]
    keys = [key for key in ("run", "prompt_id") if key in paired]
    prompts = paired.groupby(keys)[["new_tokens", "wall_seconds", "new_tokens_ar", "wall_seconds_ar"]].sum()
    if not len(prompts):
        return float("nan")
    mine = (prompts.new_tokens / prompts.wall_seconds).mean()
    theirs = (prompts.new_tokens_ar / prompts.wall_seconds_ar).mean()
    return float(mine / theirs)


def paired_speedup(paired: pd.DataFrame) -> dict[str, float]:
    """The speedup columns of a variant's turns joined with their `ar` turns (``paired_with_ar``)."""
    ratio = paired_ratios(paired).to_numpy()
    low, high = prompt_bootstrap_interval(ratio, paired.prompt_id.to_numpy())
    return {
        "speedup_paired_mean": geometric_mean(ratio), "speedup_ci_low": low, "speedup_ci_high": high,
        "speedup_total": float((paired.new_tokens.sum() / paired.wall_seconds.sum())
                               / (paired.new_tokens_ar.sum() / paired.wall_seconds_ar.sum())),
    }


def phase_summary(group: pd.DataFrame, paired: pd.DataFrame) -> dict[str, float]:
    """Seconds per emitted token by phase, the shares of model work and host time, and the bound (NaN
    where the records carry no phase times)."""
    tokens = group.new_tokens.sum()
    row = {f"{column}_per_token": group[column].sum(min_count=1) / tokens for column in PHASE_COLUMNS}
    wall = group.wall_seconds.sum()
    row["model_share"] = group[list(MODEL_PHASES)].sum(axis=1, min_count=1).sum(min_count=1) / wall
    row["host_share"] = group.phase_host.sum(min_count=1) / wall
    verify_forwards = (group.target_forwards - 1).sum()  # one prefill forward per turn
    row["target_seconds_per_forward"] = (group.phase_target.sum(min_count=1) / verify_forwards
                                         if verify_forwards else np.nan)
    drafter_forwards = group.drafter_forwards.sum()
    row["drafter_seconds_per_forward"] = (group.phase_drafter.sum(min_count=1) / drafter_forwards
                                          if drafter_forwards else np.nan)
    row["speedup_bound"] = np.nan
    if len(paired):
        mine = (paired.wall_seconds - paired.phase_host).sum(min_count=1) / paired.new_tokens.sum()
        theirs = (paired.wall_seconds_ar - paired.phase_host_ar).sum(min_count=1) / paired.new_tokens_ar.sum()
        row["speedup_bound"] = theirs / mine if mine > 0 else np.nan
    return row
