"""`prism`: EAGLE's adapter (catch-up on accepted tokens, EAGLE-2 beam tree, shared verifier, drafter-FLOP
accounting) over a PRISM drafter: draft step k (1 = the catch-up forward that drafts depth 1, k >= 2 = the
expansion of the depth k-1 frontier, which drafts depth k) runs module ``f_map(k)`` on the one shared KV cache.
Each module gets its own CUDA-graph key. A step's FLOPs are one module's (an EAGLE head step's at equal width);
``details`` give the drafter's parameters (all M modules) and a step's (one module)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial

import torch

from harness.backend.models import LoadedModel
from harness.engine.adapter import AdapterBase
from harness.engine.method_spec import BuildInputs
from harness.trees.beam_shape import BeamShape
from methods.eagle.adapter import EagleAdapter
from methods.prism import PrismOptions
from methods.prism.head import PrismHead, load_prism

class PrismAdapter(EagleAdapter):
    """The `prism` adapter (see the module docstring)."""

    # one request at a time: its parent's batch rows would serve it (its greedy batch check passes), but every
    # batched method adds a sampling check of batch rows to the suite, which has no time left for it
    batch_row = AdapterBase.batch_row

    def __init__(self, head: PrismHead, target: LoadedModel, shape: BeamShape) -> None:
        super().__init__(head, target, shape)
        self.details.update({"modules": head.module_count, "step_modules": list(head.step_modules),
                             "step_parameters": head.step_parameters(),
                             "depth_modules": [head.module_index(depth) + 1 for depth in range(1, shape.depth + 1)]})

    def step_head(self, step: int) -> tuple[Callable[..., torch.Tensor], Hashable]:
        index = self.head.module_index(step)
        return partial(self.head, step=step), ("head", index)


def build(options: PrismOptions, inputs: BuildInputs) -> PrismAdapter:
    target = inputs.target
    head = load_prism(inputs.drafter_dir, target.model)
    return PrismAdapter(head, target, options.shape())
