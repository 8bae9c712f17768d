"""Quality gates: after training, a model's held-out figures against the config's thresholds (``gates``).

A target beyond its held-out perplexity, greedy repetition rate or looping share, a draft LM beyond its perplexity,
or a drafter below its held-out top-1 agreement is a model whose benchmark would mislead (a looping target is
trivially draftable), so training stops the pipeline with one line naming the figure, the threshold and what to do.
With ``allow_weak_models`` the line is a warning instead, kept in the model's metrics (``gate``) for the report's
warning block. Torch-free: it reads the metrics dictionaries the trainers write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.errors import DraftcountError


def _degeneracy(name: str) -> Callable[[dict], float | None]:
    return lambda metrics: (metrics.get("degeneracy") or {}).get(name)


def heldout_agreement(metrics: dict) -> float | None:
    """A drafter's held-out top-1 agreement with the target at its first draft step (``train_drafter`` records it;
    what it means: the drafter kit's contract, ``harness.training.drafters``)."""
    values = metrics.get("heldout_top1_agreement_by_step")
    return float(values[0]) if values else None


@dataclass(frozen=True)
class Gate:
    figure: str  # as the line names it
    read: Callable[[dict], float | None]
    bound: str  # max | min


GATES = {
    "max_heldout_perplexity": Gate("held-out perplexity", lambda metrics: metrics.get("heldout_perplexity"), "max"),
    "max_repetition_rate": Gate("greedy repetition rate", _degeneracy("repetition_rate"), "max"),
    "max_looping_share": Gate("looping share", _degeneracy("looping_share"), "max"),
    "min_heldout_agreement": Gate("held-out top-1 agreement (first step)", heldout_agreement, "min"),
}
ADVICE = ("train it longer (more steps) or check its data; to go on with a warning at the top of the report, add "
          "`--config allow_weak_models=true` to the snakemake command (`python -m harness train`: `--allow-weak`)")


def gate_failures(name: str, metrics: dict, thresholds: dict[str, float]) -> list[str]:
    """One line per threshold ``metrics`` is beyond (a figure the metrics lack is not checked)."""
    unknown = sorted(set(thresholds) - set(GATES))
    if unknown:
        raise DraftcountError(f"unknown quality gate {unknown[0]!r} (known: {', '.join(GATES)})")
    failures = []
    for key, limit in thresholds.items():
        gate = GATES[key]
        value = gate.read(metrics)
        if value is None:
            continue
        beyond = value > limit if gate.bound == "max" else value < limit
        if beyond:
            relation = "above the maximum" if gate.bound == "max" else "below the minimum"
            failures.append(f"{name}: {gate.figure} {value:.3g} is {relation} {limit:g} (gates: {key})")
    return failures


def apply_gates(name: str, metrics: dict, thresholds: dict[str, float] | None, allow_weak: bool) -> dict:
    """``metrics`` with its gate verdict (``gate``: thresholds, failures, allowed); raises the first failure as one
    line unless ``allow_weak``, in which case every failure is printed as a warning."""
    thresholds = dict(thresholds or {})
    failures = gate_failures(name, metrics, thresholds)
    if failures and not allow_weak:
        raise DraftcountError(f"quality gate: {failures[0]}; {ADVICE}")
    for failure in failures:
        print(f"warning: weak model (allow_weak_models): {failure}")
    return {**metrics, "gate": {"thresholds": thresholds, "failures": failures, "allowed_weak": bool(failures)}}
