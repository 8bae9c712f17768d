"""`ar`: the autoregressive baseline on the same engine (a root-only tree every step)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.engine.adapter import NoDrafts
from harness.engine.method_spec import BuildInputs, MethodSpec
from harness.measure.costs import NO_DRAFTING


@dataclass(frozen=True)
class AutoregressiveOptions:
    """The baseline has no options."""


class ArAdapter(NoDrafts):
    """A root-only tree every step: one target forward per token."""


def _build(options: AutoregressiveOptions, inputs: BuildInputs) -> ArAdapter:
    return ArAdapter()


METHOD = MethodSpec(options=AutoregressiveOptions, build=_build, cost=NO_DRAFTING)
