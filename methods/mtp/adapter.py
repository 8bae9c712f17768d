"""`mtp`: EAGLE's adapter (catch-up on accepted tokens with the target's hidden states, a beam tree, the shared
verifier, drafter-FLOP accounting) over MTP modules: draft step k (1 = the catch-up forward that drafts depth 1,
k >= 2 = the expansion of the depth k-1 frontier) runs module ((k - 1) mod M) on the one KV cache, each module its
own CUDA-graph key. With the default ``top_k: 1`` the tree is a chain."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial

import torch

from harness.backend.models import LoadedModel
from harness.engine.adapter import AdapterBase
from harness.engine.method_spec import BuildInputs
from harness.trees.beam_shape import BeamShape
from methods.eagle.adapter import EagleAdapter
from methods.mtp import MtpOptions
from methods.mtp.checkpoint import load_mtp_drafter
from methods.mtp.head import MtpHead


class MtpAdapter(EagleAdapter):
    """The `mtp` adapter (see the module docstring)."""

    batch_row = AdapterBase.batch_row  # one request at a time (not in the load study)

    def __init__(self, head: MtpHead, target: LoadedModel, shape: BeamShape) -> None:
        super().__init__(head, target, shape)
        self.details.update({"modules": head.module_count, "step_parameters": head.step_parameters()})

    def step_head(self, step: int) -> tuple[Callable[..., torch.Tensor], Hashable]:
        return partial(self.head, step=step), ("module", self.head.module_index(step))


def build(options: MtpOptions, inputs: BuildInputs) -> MtpAdapter:
    return MtpAdapter(load_mtp_drafter(inputs.drafter_dir, inputs.target.model), inputs.target, options.shape())
