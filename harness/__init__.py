"""draftcount harness: model loading, token trees, verification, the generation loop, counters, records.

It knows no method by name; methods live in the `methods` package.
"""

from harness.engine import Generation, generate
from harness.errors import DraftcountError
from harness.models import LoadedModel, load_model, wrap_model
from harness.sampling import SamplingConfig

__all__ = ["DraftcountError", "Generation", "LoadedModel", "SamplingConfig", "generate", "load_model", "wrap_model"]
