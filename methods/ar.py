"""`ar`: the autoregressive baseline on the same engine (a root-only tree every step)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.adapter import NoDrafts
from methods import BuildInputs, MethodSpec, register


@dataclass(frozen=True)
class AutoregressiveOptions:
    """The baseline has no options."""


def _build(options: AutoregressiveOptions, inputs: BuildInputs) -> NoDrafts:
    return NoDrafts()


SPEC = register(
    MethodSpec(
        name="ar",
        summary="autoregressive baseline: one target forward per token",
        options_type=AutoregressiveOptions,
        build=_build,
    )
)
