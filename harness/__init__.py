"""draftcount harness: model loading, token trees, verification, the generation loop, counters, records.

It knows no method by name; methods live in the `methods` package.

The names below are imported on first use (PEP 562), so that what needs no model (the Snakefile's planning,
``python -m harness summarize|figures|report|export-specbench``, ``--help``) starts without torch or transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.engine import Generation, generate
    from harness.errors import DraftcountError
    from harness.models import LoadedModel, load_model, wrap_model
    from harness.sampling import SamplingConfig

_EXPORTED_FROM = {
    "DraftcountError": "harness.errors",
    "Generation": "harness.engine",
    "LoadedModel": "harness.models",
    "SamplingConfig": "harness.sampling",
    "generate": "harness.engine",
    "load_model": "harness.models",
    "wrap_model": "harness.models",
}

__all__ = sorted(_EXPORTED_FROM)


def __getattr__(name: str) -> Any:
    module = _EXPORTED_FROM.get(name)
    if module is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTED_FROM))
