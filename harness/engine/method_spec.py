"""The method contract: what a method module defines (``METHOD = MethodSpec(...)``), how a run builds its adapter
from it, and the cost types a method's model for the 8B-shape projection is written in (``CostModel`` over
``Latencies``).

The catalog (``harness.catalog``) names the method, its module and the inputs it needs; the module's ``METHOD``
gives its options dataclass (strict: an unknown option is an error), the function that builds its adapter, and
optionally its drafter trainer and its cost model for the 8B-shape projection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.backend.kv_cache import refuse_drafting, rollback_refusal
from harness.backend.models import LoadedModel
from harness.catalog import entry, load_method, options_type
from harness.engine.adapter import DraftAdapter
from harness.errors import DraftcountError
from harness.options import parse_options

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class BuildInputs:
    """Everything a method may build its adapter from."""

    target: LoadedModel
    draft: LoadedModel | None
    drafter_dir: Path | None


@dataclass(frozen=True)
class MethodSpec:
    """A method's code. options: its options dataclass. build: (options, BuildInputs) -> adapter. train: for a
    method that needs a trained drafter, (``harness.training.drafters.DrafterTrainRequest``) -> metrics dict.
    cost: its drafting-cost model for the projection (``harness.engine.method_spec.CostModel``), or None."""

    options: type
    build: Callable[[Any, BuildInputs], DraftAdapter]
    train: Callable[[Any], dict] | None = None
    cost: Any = None


def method_spec(name: str) -> MethodSpec:
    spec = load_method(name)
    if not isinstance(spec, MethodSpec):
        raise DraftcountError(f"method {name!r}: METHOD is a {type(spec).__name__}, not a MethodSpec")
    if spec.options is not options_type(name):
        raise DraftcountError(f"method {name!r}: METHOD.options is not the catalog's options class "
                              f"({entry(name).options})")
    return spec


def parse_method_options(name: str, values: Mapping[str, Any]) -> Any:
    """``values`` (strings from the command line, or YAML values) as the method's options dataclass."""
    return parse_options(options_type(name), values, f"method '{name}'")


def build_adapter(name: str, options: Mapping[str, Any] | Any, inputs: BuildInputs) -> tuple[DraftAdapter, Any]:
    """Parse ``options`` (a mapping, or an already-built options object) and build the method's adapter."""
    spec = method_spec(name)
    parsed = options if isinstance(options, spec.options) else parse_method_options(name, options)
    item = entry(name)
    if item.drafts:  # a hybrid target: dropping rejected drafts would leave its recurrent state advanced
        refuse_drafting(f"method '{name}'", rollback_refusal(inputs.target.config))
    if item.needs_draft and inputs.draft is None:
        raise DraftcountError(f"method '{name}' needs a draft model (--draft)")
    if item.needs_drafter and inputs.drafter_dir is None:
        raise DraftcountError(f"method '{name}' needs a trained drafter directory (--drafter)")
    return spec.build(parsed, inputs), parsed


# The projection's cost types (``harness.measure.projections.projection`` measures the latencies; each method's ``cost``
# turns them into the seconds its drafting takes per step).

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

    def table(self) -> "pd.DataFrame":
        import pandas as pd

        rows = [{"component": "target", "tokens": size, "ms": seconds * 1e3} for size, seconds in self.target.items()]
        rows += [{"component": "draft_lm", "tokens": size, "ms": s * 1e3} for size, s in self.draft_lm.items()]
        rows += [{"component": name, "tokens": self.top_k, "ms": s * 1e3} for name, s in self.drafter_steps.items()]
        return pd.DataFrame(rows)


@dataclass(frozen=True)
class CostModel:
    """How one method drafts, in latencies.

    drafting_seconds(options, latencies): seconds of one step's drafting under the method's options (a dict as
    recorded in the summary), or nan where the model does not cover the options.
    step_latency(target, top_k, prefix, repeats, timing, draft_vocab): for a method with a drafter of its own, the
    seconds of one drafter step at the target's shape, its logits over ``draft_vocab`` tokens (0: the whole
    vocabulary; ``harness.training.draft_vocab``) (stored in ``Latencies.drafter_steps[component]``); None otherwise.
    random_adapter(options, target): for such a method, its adapter (options parsed) over a random drafter of the
    shape ``step_latency`` times, built in memory for the target (what ``measure engine-efficiency`` runs); None
    otherwise.
    """

    drafting_seconds: Callable[[dict, Latencies], float]
    step_latency: Callable[..., float] | None = None
    component: str = ""
    random_adapter: Callable[[Any, LoadedModel], DraftAdapter] | None = None

    def __post_init__(self) -> None:
        if self.step_latency is not None and not self.component:
            raise ValueError("a cost model that measures a drafter step must name its component")


NO_DRAFTING = CostModel(lambda options, latencies: 0.0)


def option(options: dict[str, Any], name: str, default: Any) -> Any:
    """An option as recorded in a summary row, or its default."""
    value = options.get(name)
    return default if value is None else value
