"""`hedgespec`: online drafter selection, HedgeSpec ("Not-a-Bandit: Provably No-Regret Drafter Selection in
Speculative Decoding for LLMs", Liu et al., ICLR 2026, arXiv 2510.20064).

A meta-method over N experts, each a catalog method with its options, given as ``experts``: a comma-separated list
of ``method[:key=value[:key=value...]]``. The keys ``drafter`` (a trained drafter directory, for methods that need
one) and ``draft`` (a draft LM directory) give an expert its inputs; ``name`` labels it (default: the method,
numbered when repeated); every other key is one of the method's options. Example:
``eagle:drafter=work/drafters/eagle_code:name=code,eagle:drafter=work/drafters/eagle_text:name=text,pld``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.catalog import entry, method_names, options_type
from harness.errors import DraftcountError
from harness.options import parse_options

EXPERT_KEYS = ("drafter", "draft", "name")  # an expert's inputs and label; its other keys are the method's options

UNSUPPORTED = {"hedgespec": "an expert cannot itself be a hedgespec",
               "lyanna": "lyanna's run-ahead states assume its own chain was verified"}


@dataclass(frozen=True)
class HedgeSpecOptions:
    experts: tuple[str, ...] = ("pld", "stand")
    reset: Literal["generation", "run"] = "generation"  # the learner starts afresh for every query, or once
    seed: int = 0  # the learner's own random picks

    def __post_init__(self) -> None:
        if len(self.experts) < 2:
            raise DraftcountError(f"method 'hedgespec' needs at least 2 experts, got {list(self.experts)}")
        for spec in self.experts:
            parse_expert(spec)


def parse_expert(spec: str) -> tuple[str, dict[str, str]]:
    """``method:key=value:...`` as (method, settings); one clear error for a bad spec."""
    method, *pairs = spec.strip().split(":")
    if method not in method_names():
        raise DraftcountError(f"hedgespec expert {spec!r}: {method!r} is not a catalog method")
    if method in UNSUPPORTED:
        raise DraftcountError(f"hedgespec expert {spec!r}: {UNSUPPORTED[method]}")
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise DraftcountError(f"hedgespec expert {spec!r}: {pair!r} is not key=value")
        settings[key] = value
    item = entry(method)
    if item.needs_drafter and "drafter" not in settings:
        raise DraftcountError(f"hedgespec expert {spec!r}: method {method!r} needs drafter=DIR")
    if item.needs_draft and "draft" not in settings:
        raise DraftcountError(f"hedgespec expert {spec!r}: method {method!r} needs draft=DIR")
    parse_options(options_type(method), {key: value for key, value in settings.items() if key not in EXPERT_KEYS},
                  f"hedgespec expert {spec!r}")  # its option names and values, checked before anything loads
    return method, settings
