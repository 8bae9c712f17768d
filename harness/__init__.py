"""draftcount harness: model loading, token trees, verification, the generation loop, counters, records.

Packages by concern, each importing only those below it: ``backend`` <- ``trees`` <- ``verify`` <- ``engine``
<- {``runner``, ``training``, ``measure``} <- ``cli``; ``data``, ``store``, ``analysis`` and the method registry
(``catalog``) beside them, the last two without torch. It knows no method by name: methods are read from the
one catalog, ``methods/__init__.py``.

The names below are imported on first use (PEP 562), so that what needs no model (the Snakefile's planning,
``python -m harness summarize|figures|report|export-specbench``, ``--help``) starts without torch or transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.engine.loop import Generation, generate
    from harness.errors import DraftcountError
    from harness.backend.models import LoadedModel, load_model, wrap_model
    from harness.verify.sampling import SamplingConfig

_EXPORTED_FROM = {
    "DraftcountError": "harness.errors",
    "Generation": "harness.engine.loop",
    "LoadedModel": "harness.backend.models",
    "SamplingConfig": "harness.verify.sampling",
    "generate": "harness.engine.loop",
    "load_model": "harness.backend.models",
    "wrap_model": "harness.backend.models",
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
