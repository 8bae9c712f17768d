"""`ar`: the autoregressive baseline on the same engine (a root-only tree every step)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.adapter import StepContext
from harness.forward import LMOutput
from harness.tree import TokenTree, root_only
from harness.verify import Verdict
from methods import BuildInputs, MethodSpec, register


@dataclass(frozen=True)
class AutoregressiveOptions:
    """The baseline has no options."""


class Autoregressive:
    wants_target_hidden_states = False
    max_draft_nodes = 0

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        pass

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        return root_only(sequence[0, -1])

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        pass


def _build(options: AutoregressiveOptions, inputs: BuildInputs) -> Autoregressive:
    return Autoregressive()


SPEC = register(
    MethodSpec(
        name="ar",
        summary="autoregressive baseline: one target forward per token",
        options_type=AutoregressiveOptions,
        build=_build,
    )
)
