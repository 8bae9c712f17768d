"""Training OWL's LSTM drafter: ``python -m harness train --method owl --target T --data D --out DIR``.

Short windows (``seq_len`` 64 by default: OWL's point is a drafter trained on short windows that holds on long
contexts, since it never sees the context). Every position p of a window starts the LSTM from the target's last
hidden state f_p and unrolls it ``unroll_steps`` steps, fed the true tokens x_{p+1}, x_{p+2}, ... (teacher
forcing, as Arctic's speculator trains); step j is trained by soft cross-entropy (the ``objective``) against the
target's distribution softmax(lm_head(f_{p+j})) at the positions where it exists, weighted by
``step_decay``**(j-1). Features come from a dump or the target on the fly (``feature_source``), through the
shared loop (``fit_drafter``); 0 steps writes a fresh drafter.
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
from harness.training.objectives import token_loss
from methods.owl.model import LstmState, OwlLstm, arch_for, new_lstm, save_lstm

LAYERS: list[int | str] = ["last"]


@dataclass(frozen=True)
class OwlTrainOptions(DrafterLoopOptions):
    seq_len: int = 64  # short training windows (OWL trains on 256 tokens and drafts at 64K)
    unroll_steps: int = 5  # LSTM steps trained per position (tokens p+2 .. p+1+unroll_steps)
    step_decay: float = 0.8

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.unroll_steps < 1:
            raise DraftcountError(f"option 'unroll_steps' of owl training must be >= 1, got {self.unroll_steps}")
        if self.seq_len < 2:
            raise DraftcountError(f"option 'seq_len' of owl training must be >= 2, got {self.seq_len}")


def unrolled_logits(drafter: OwlLstm, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
                    steps: int) -> list[torch.Tensor]:
    """Per step j = 1..steps: logits (B, T - j, N) over the draft vocabulary; row p drafts token p + 1 + j from f_p
    and x_{p+1..p+j}."""
    tokens, features = batch["input_ids"], batch["last"]
    length = tokens.shape[1]
    carried = drafter.start(features[:, : length - 1])
    outputs = []
    for step in range(1, min(steps, length - 1) + 1):
        kept = LstmState(carried.state[:, : length - step], carried.cell[:, : length - step])
        carried = drafter.step(kept, tokens[:, step:])
        outputs.append(drafter.logits(carried.state, lm_head))
    return outputs


def owl_loss(drafter: OwlLstm, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
             options: OwlTrainOptions) -> torch.Tensor:
    features = batch["last"]
    total = features.new_zeros(())
    following = drafter.draft_vocab.next_token_probs(lm_head, features[:, 1:])  # once: step j reads rows j - 1 on
    for step, logits in enumerate(unrolled_logits(drafter, lm_head, batch, options.unroll_steps), start=1):
        total = total + options.step_decay ** (step - 1) * token_loss(options.objective)(
            logits, following[:, step - 1:], None)
    return total


@torch.no_grad()
def step_agreement(drafter: OwlLstm, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
                   steps: int) -> list[float]:
    """Per step: how often the drafter's top-1 equals the target's (true tokens fed)."""
    wanted = lm_head(batch["last"]).argmax(-1)
    return [float((drafter.draft_vocab.to_target(logits.argmax(-1)) == wanted[:, step:]).float().mean())
            for step, logits in enumerate(unrolled_logits(drafter, lm_head, batch, steps), start=1)]


def train_owl(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) an OWL LSTM drafter and save it to ``request.out``."""
    options = parse_options(OwlTrainOptions, request.options, "owl training")
    request = budgeted(request, options)
    target = frozen_target(request)
    source = feature_source(request, target, LAYERS, options.seq_len)
    drafter = new_lstm(arch_for(target.model, options.unroll_steps), options.seed,
                       choose_draft_vocab(options.draft_vocab, source, target)).to(target.device)
    lm_head = target.model.get_output_embeddings()
    batch_loss = lambda batch: owl_loss(drafter, lm_head, batch, options)  # noqa: E731
    return train_drafter(request, options, target, source,
                         lambda: Fitted(drafter, fit_drafter(drafter, batch_loss, source, target, request, options)),
                         lambda module, batch: step_agreement(module, lm_head, batch, options.unroll_steps), save_lstm)
