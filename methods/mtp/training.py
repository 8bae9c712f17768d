"""Training MTP modules post hoc on the frozen target: ``python -m harness train --method mtp --target T --data D
--out DIR``.

DeepSeek-V3 trains its MTP modules with the model: module k, fed module k-1's hidden state at position i and the
token i + k, predicts token i + k + 1. On a frozen target the same chain is a training-time-test unrolling
(PRISM's ``switching_outputs`` over ``harness.training.unroll.unrolled_forward``): step k feeds module
((k - 1) mod M) the previous step's outputs shifted by one, and is trained by soft cross-entropy (the ``objective``)
against the target's next-token distribution, weighted by ``step_decay``**(k-1) (PRISM's ``unrolled_token_loss``); no
feature regression (an MTP module predicts tokens, not the target's next state). 0 steps writes fresh modules.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.draft_vocab import choose_draft_vocab
from harness.training.drafters import (
    budgeted,
    DrafterLoopOptions, DrafterTrainRequest, Fitted, feature_source, fit_drafter, frozen_target, train_drafter,
)
from harness.training.objectives import uses_tree_loss
from methods.mtp.head import MtpHead, new_mtp_head, save_mtp
from methods.prism.training import step_agreement, unrolled_token_loss  # PRISM's unrolling and its loss


@dataclass(frozen=True)
class MtpTrainOptions(DrafterLoopOptions):
    modules: int = 1  # M modules; draft step k runs module ((k - 1) mod M) + 1
    unroll_steps: int = 3  # chained steps trained (the depth of the default chain)
    step_decay: float = 0.8  # weight of step k: step_decay**(k-1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.modules < 1 or self.unroll_steps < 1:
            raise DraftcountError(f"mtp training needs modules >= 1 and unroll_steps >= 1, got {self.modules} and "
                                  f"{self.unroll_steps}")
        if uses_tree_loss(self.objective):
            raise DraftcountError(f"mtp trains with a token-level objective; {self.objective!r} adds a tree loss "
                                  f"that only the eagle trainer implements")


def mtp_loss(head: MtpHead, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
             options: MtpTrainOptions) -> torch.Tensor:
    return unrolled_token_loss(head, lm_head, batch, options.unroll_steps, options.step_decay, options.objective)


def train_mtp(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) MTP modules and save them to ``request.out``."""
    options = parse_options(MtpTrainOptions, request.options, "mtp training")
    request = budgeted(request, options)
    target = frozen_target(request)
    source = feature_source(request, target, ["last"], options.seq_len)
    lm_head = target.model.get_output_embeddings()
    head = new_mtp_head(target.model, options.modules, options.seed,
                        choose_draft_vocab(options.draft_vocab, source, target)).to(target.device)
    batch_loss = lambda batch: mtp_loss(head, lm_head, batch, options)  # noqa: E731
    return train_drafter(request, options, target, source,
                         lambda: Fitted(head, fit_drafter(head, batch_loss, source, target, request, options),
                                        {"step_parameters": head.step_parameters()}),
                         lambda module, batch: step_agreement(module, lm_head, batch, options.unroll_steps), save_mtp)
