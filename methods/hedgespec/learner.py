"""NormalHedge (Chaudhuri, Freund and Hsu 2009): the parameter-free experts learner HedgeSpec builds on.

Each round every expert has a loss in [0, 1]; the learner's loss is the weighted mean. Expert i's regret R_i is the
learner's cumulative loss minus its own. Weights are w_i ∝ ([R_i]+ / c) exp([R_i]+² / 2c), with the scale c chosen
so that the mean of exp([R_i]+² / 2c) over the experts is e; with no positive regret the weights are uniform.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def normalhedge_scale(regrets: Sequence[float], iterations: int = 100) -> float:
    """The c with mean_i exp([R_i]+^2 / 2c) = e (bisection on a log scale; the mean falls as c grows)."""
    positive = [max(regret, 0.0) for regret in regrets]
    if max(positive) == 0.0:
        return 1.0

    def excess(c: float) -> float:  # log(mean exp(...)) - 1, computed stably
        exponents = [r * r / (2 * c) for r in positive]
        top = max(exponents)
        return top + math.log(sum(math.exp(e - top) for e in exponents) / len(exponents)) - 1.0

    low, high = 1e-12, max(positive) ** 2 + 1.0
    while excess(high) > 0:
        high *= 2
    for _ in range(iterations):
        middle = math.sqrt(low * high)
        if excess(middle) > 0:
            low = middle
        else:
            high = middle
    return high


def normalhedge_weights(regrets: Sequence[float]) -> list[float]:
    """The learner's distribution over experts for the given cumulative regrets."""
    positive = [max(regret, 0.0) for regret in regrets]
    if max(positive, default=0.0) == 0.0:
        return [1.0 / len(regrets)] * len(regrets)
    c = normalhedge_scale(regrets)
    logs = [math.log(r / c) + r * r / (2 * c) if r > 0 else -math.inf for r in positive]
    top = max(logs)
    raw = [math.exp(value - top) if value > -math.inf else 0.0 for value in logs]
    total = sum(raw)
    return [value / total for value in raw]


class NormalHedge:
    """Cumulative regrets of N experts and the weights they give."""

    def __init__(self, experts: int) -> None:
        self.regrets = [0.0] * experts
        self.weights = [1.0 / experts] * experts

    def update(self, losses: Sequence[float]) -> float:
        """One round; returns the learner's (expected) loss."""
        learner = sum(weight * loss for weight, loss in zip(self.weights, losses))
        self.regrets = [regret + learner - loss for regret, loss in zip(self.regrets, losses)]
        self.weights = normalhedge_weights(self.regrets)
        return learner
