"""`ar`: its adapter and ``METHOD`` (the options are the package's: ``methods.ar``)."""

from __future__ import annotations


from harness.engine.adapter import NoDrafts
from methods.ar import AutoregressiveOptions
from harness.engine.method_spec import BuildInputs, MethodSpec, NO_DRAFTING


class ArAdapter(NoDrafts):
    """A root-only tree every step: one target forward per token."""


def _build(options: AutoregressiveOptions, inputs: BuildInputs) -> ArAdapter:
    return ArAdapter()


METHOD = MethodSpec(options=AutoregressiveOptions, build=_build, cost=NO_DRAFTING)
