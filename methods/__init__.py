"""Method adapters, registered by name.

A method is a MethodSpec: its options dataclass, whether it needs a draft LM
or a trained drafter directory, and a ``build`` function returning a
DraftAdapter. Add a method by writing one module that calls ``register`` and
importing it below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.adapter import DraftAdapter
from harness.errors import DraftcountError
from harness.models import LoadedModel
from harness.options import parse_options


@dataclass(frozen=True)
class BuildInputs:
    """Everything a method may build its adapter from."""

    target: LoadedModel
    draft: LoadedModel | None
    drafter_dir: Path | None


@dataclass(frozen=True)
class MethodSpec:
    name: str
    summary: str
    options_type: type
    build: Callable[[Any, BuildInputs], DraftAdapter]
    needs_draft: bool = False
    needs_drafter_dir: bool = False
    train: Callable[[Any], dict] | None = None  # DrafterTrainRequest -> metrics, for `python -m harness train`

    def parse_options(self, values: Mapping[str, Any]) -> Any:
        return parse_options(self.options_type, values, f"method '{self.name}'")


_REGISTRY: dict[str, MethodSpec] = {}


def register(spec: MethodSpec) -> MethodSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"method {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def available_methods() -> list[str]:
    return sorted(_REGISTRY)


def get_method(name: str) -> MethodSpec:
    if name not in _REGISTRY:
        raise DraftcountError(f"unknown method {name!r}; known methods: {', '.join(available_methods())}")
    return _REGISTRY[name]


def build_adapter(name: str, options: Mapping[str, Any] | Any, inputs: BuildInputs) -> tuple[DraftAdapter, Any]:
    """Parse ``options`` (a mapping, or an already-built options object) and build the method's adapter."""
    spec = get_method(name)
    parsed = options if isinstance(options, spec.options_type) else spec.parse_options(options)
    if spec.needs_draft and inputs.draft is None:
        raise DraftcountError(f"method '{name}' needs a draft model (--draft)")
    if spec.needs_drafter_dir and inputs.drafter_dir is None:
        raise DraftcountError(f"method '{name}' needs a trained drafter directory (--drafter)")
    return spec.build(parsed, inputs), parsed


from methods import ar as _ar  # noqa: E402,F401  (registers 'ar')
from methods import sd as _sd  # noqa: E402,F401  (registers 'sd')
from methods import tree_sd as _tree_sd  # noqa: E402,F401  (registers 'tree_sd')
from methods import eagle as _eagle  # noqa: E402,F401  (registers 'eagle')
from methods import lyanna as _lyanna  # noqa: E402,F401  (registers 'lyanna')
