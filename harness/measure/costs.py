"""The projection's cost models: latencies measured at realistic shapes, and how a method turns them into the
seconds its drafting takes per step.

A method's cost model lives with the method (``METHOD.cost``, a ``CostModel``); the projection
(``harness.measure.projection``) measures the target's and the draft LM's latencies itself and each method's
own drafter step through its ``CostModel.step_latency``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Latencies:
    """Seconds per call at the measured shapes."""

    target: dict[int, float]  # tree tokens -> one target forward
    draft_lm: dict[int, float]  # tokens -> one draft-LM forward
    top_k: int  # nodes per drafter step in ``drafter_steps``
    drafter_steps: dict[str, float] = field(default_factory=dict)  # component -> one drafter step (a method's own)

    def target_at(self, tokens: float) -> float:
        sizes = sorted(self.target)
        return float(np.interp(tokens, sizes, [self.target[size] for size in sizes]))

    def draft_at(self, tokens: float) -> float:
        sizes = sorted(self.draft_lm)
        return float(np.interp(tokens, sizes, [self.draft_lm[size] for size in sizes]))

    def step(self, component: str) -> float:
        """One drafter step of ``component`` (nan when it was not measured)."""
        return self.drafter_steps.get(component, float("nan"))

    def table(self) -> pd.DataFrame:
        rows = [{"component": "target", "tokens": size, "ms": seconds * 1e3} for size, seconds in self.target.items()]
        rows += [{"component": "draft_lm", "tokens": size, "ms": s * 1e3} for size, s in self.draft_lm.items()]
        rows += [{"component": name, "tokens": self.top_k, "ms": s * 1e3} for name, s in self.drafter_steps.items()]
        return pd.DataFrame(rows)


@dataclass(frozen=True)
class CostModel:
    """How one method drafts, in latencies.

    drafting_seconds(options, latencies): seconds of one step's drafting under the method's options (a dict as
    recorded in the summary), or nan where the model does not cover the options.
    step_latency(target, top_k, prefix, repeats, timing): for a method with a drafter of its own, the seconds of
    one drafter step at the target's shape (stored in ``Latencies.drafter_steps[component]``); None otherwise.
    """

    drafting_seconds: Callable[[dict, Latencies], float]
    step_latency: Callable[..., float] | None = None
    component: str = ""

    def __post_init__(self) -> None:
        if self.step_latency is not None and not self.component:
            raise ValueError("a cost model that measures a drafter step must name its component")


NO_DRAFTING = CostModel(lambda options, latencies: 0.0)


def option(options: dict[str, Any], name: str, default: Any) -> Any:
    """An option as recorded in a summary row, or its default."""
    value = options.get(name)
    return default if value is None else value
