"""Latencies at realistic shapes (random weights) and the speedups they project from measured acceptance.

The target is shaped like Llama-3.1-8B, the draft LM like Llama-3.2-1B, and every method with a drafter of its
own measures one drafter step at the target's width with the code it runs (its cost model, ``METHOD.cost``,
``harness.engine.method_spec``). Latencies are
medians of repeated forwards after warm-up, timed with CUDA events on a GPU (``perf_counter``
elsewhere). A summary table's measured acceptance (tau and tokens verified per step, from the small
models) then gives, per variant,

    step seconds   = drafting seconds (the method's cost model) + target(tokens verified per step)
    projected      = (accepted drafts per step + 1) x target(1) / step seconds

a projection at 8B scale under the assumption that acceptance carries over: not a measurement.
"""

from __future__ import annotations

import json
import math

import pandas as pd
from transformers import PreTrainedModel

from harness.catalog import method_names
from harness.engine.method_spec import Latencies, method_spec
from harness.errors import DraftcountError

def project_speedups(summary: pd.DataFrame, latencies: Latencies) -> pd.DataFrame:
    """Per summary row: the drafting and verification seconds of a step at the measured shapes, and the
    projected speedup, next to the measured (small-model) tau and speedup."""
    rows = []
    for _, row in summary.iterrows():
        options = json.loads(row.get("options") or "{}")
        drafting = drafting_seconds(row.method, options, latencies)
        verify = latencies.target_at(max(1.0, row.verified_per_step))
        rows.append({
            "variant": row.variant, "method": row.method, "dataset": row.dataset, "temperature": row.temperature,
            "tau": row.tau, "verified_per_step": row.verified_per_step,
            "measured_speedup": row.get("speedup_paired_mean", math.nan),
            "draft_ms": drafting * 1e3, "verify_ms": verify * 1e3,
            "projected_speedup": projected_speedup(row.accepted_per_step + 1, row.verified_per_step, drafting,
                                                   latencies),
        })
    return pd.DataFrame(rows)


def projected_speedup(tokens_per_step: float, verified_per_step: float, drafting: float, latencies: Latencies
                      ) -> float:
    """The speedup over `ar` of a step that costs its forwards alone: ``tokens_per_step`` x target(1) / (drafting
    seconds + target(tokens verified per step)), the target's forwards at ``latencies``."""
    return tokens_per_step * latencies.target_at(1) / (drafting + latencies.target_at(max(1.0, verified_per_step)))


def drafting_seconds(method: str, options: dict, latencies: Latencies) -> float:
    """One step's drafting seconds by the method's own cost model (``METHOD.cost``); nan for a method that
    has none or that the catalog does not know."""
    try:
        cost = method_spec(method).cost
    except DraftcountError:
        return math.nan
    return math.nan if cost is None else float(cost.drafting_seconds(options, latencies))


def drafter_step_latencies(target: PreTrainedModel, top_k: int, prefix: int, repeats: int,
                           timing: str = "eager", draft_vocab: int = 0) -> dict[str, float]:
    """Every catalog method's own drafter step (its cost model's ``step_latency``) at ``target``'s shape, its
    logits over ``draft_vocab`` tokens (0: the whole vocabulary)."""
    steps = {}
    for name in method_names():
        cost = method_spec(name).cost
        if cost is not None and cost.step_latency is not None:
            steps[cost.component] = cost.step_latency(target, top_k, prefix, repeats, timing, draft_vocab)
    return steps
