"""What a method module defines (``METHOD = MethodSpec(...)``) and how a run builds its adapter from it.

The catalog (``harness.catalog``) names the method, its module and the inputs it needs; the module's ``METHOD``
gives its options dataclass (strict: an unknown option is an error), the function that builds its adapter, and
optionally its drafter trainer and its cost model for the 8B-shape projection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.backend.models import LoadedModel
from harness.catalog import entry, load_method
from harness.engine.adapter import DraftAdapter
from harness.errors import DraftcountError
from harness.options import parse_options


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
    cost: its drafting-cost model for the projection (``harness.measure.costs.CostModel``), or None."""

    options: type
    build: Callable[[Any, BuildInputs], DraftAdapter]
    train: Callable[[Any], dict] | None = None
    cost: Any = None


def method_spec(name: str) -> MethodSpec:
    spec = load_method(name)
    if not isinstance(spec, MethodSpec):
        raise DraftcountError(f"method {name!r}: METHOD is a {type(spec).__name__}, not a MethodSpec")
    return spec


def parse_method_options(name: str, values: Mapping[str, Any]) -> Any:
    """``values`` (strings from the command line, or YAML values) as the method's options dataclass."""
    return parse_options(method_spec(name).options, values, f"method '{name}'")


def build_adapter(name: str, options: Mapping[str, Any] | Any, inputs: BuildInputs) -> tuple[DraftAdapter, Any]:
    """Parse ``options`` (a mapping, or an already-built options object) and build the method's adapter."""
    spec = method_spec(name)
    parsed = options if isinstance(options, spec.options) else parse_method_options(name, options)
    item = entry(name)
    if item.needs_draft and inputs.draft is None:
        raise DraftcountError(f"method '{name}' needs a draft model (--draft)")
    if item.needs_drafter and inputs.drafter_dir is None:
        raise DraftcountError(f"method '{name}' needs a trained drafter directory (--drafter)")
    return spec.build(parsed, inputs), parsed
