"""Training Medusa or Hydra heads: ``python -m harness train --method medusa --target T --data D --out DIR``.

Self-distillation on the frozen target (Medusa's recipe for a model without its training data): at every position
p of a window, head k is trained by soft cross-entropy (the ``objective``) against the target's distribution
softmax(lm_head(h_{p+k})) for x_{p+1+k}, weighted by ``step_decay``**(k-1) (Medusa: 0.8^k). Hydra heads are fed the
true tokens x_{p+1..p+k} (teacher forcing). Features come from a dump or the target on the fly, through the shared
loop (``fit_drafter``); 0 steps writes fresh heads. With ``--heldout``, each head's accuracy at ranks 1-10 there
(Medusa's calibration) goes into the metrics and the drafter's metadata, for ``choices: calibrated``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.draft_vocab import DraftVocab, choose_draft_vocab
from harness.training.drafters import (
    budgeted,
    DrafterLoopOptions, DrafterTrainRequest, Fitted, feature_source, fit_drafter, frozen_target, train_drafter,
)
from harness.training.objectives import token_loss
from methods.medusa.checkpoint import CALIBRATION, save_heads
from methods.medusa.model import MedusaArch, MedusaHeads, arch_for, new_heads

LAYERS: list[int | str] = ["last"]


@dataclass(frozen=True)
class MedusaTrainOptions(DrafterLoopOptions):
    heads: int = 5  # K heads: drafts up to depth K
    hydra: bool = False  # Hydra heads (conditioned on the drafted path)
    own_lm_heads: bool = True  # each head its own LM head started from the target's (Medusa-1)
    step_decay: float = 0.8

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.heads < 1:
            raise DraftcountError(f"option 'heads' of medusa training must be >= 1, got {self.heads}")
        if self.seq_len <= self.heads + 1:
            raise DraftcountError(f"option 'seq_len' of medusa training must exceed heads + 1, got {self.seq_len}")


def head_logits(heads: MedusaHeads, embed: nn.Module, lm_head: nn.Module,
                batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Per head k = 1..K: logits (B, T - k, N) over the draft vocabulary; row p drafts x_{p+1+k} from h_p (and,
    Hydra, x_{p+1..p+k})."""
    tokens, features = batch["input_ids"], batch["last"]
    length = tokens.shape[1]
    out = []
    for head in range(1, heads.arch.heads + 1):
        path = None
        if heads.arch.hydra:
            path = embed(torch.stack([tokens[:, j: length - head + j] for j in range(1, head + 1)], dim=2))
        out.append(heads.logits(head, heads.hidden(head, features[:, : length - head], path), lm_head))
    return out


def medusa_loss(heads: MedusaHeads, embed: nn.Module, lm_head: nn.Module, batch: dict[str, torch.Tensor],
                options: MedusaTrainOptions) -> torch.Tensor:
    features = batch["last"]
    total = features.new_zeros(())
    following = heads.draft_vocab.next_token_probs(lm_head, features[:, 1:])  # once: head k reads rows k - 1 on
    for head, logits in enumerate(head_logits(heads, embed, lm_head, batch), start=1):
        total = total + options.step_decay ** (head - 1) * token_loss(options.objective)(
            logits, following[:, head - 1:], None)
    return total


RANKS = 10  # the ranks a calibration measures (Medusa's calibrated trees read at most the top 10)


@torch.no_grad()
def head_rank_accuracy(heads: MedusaHeads, embed: nn.Module, lm_head: nn.Module,
                       batch: dict[str, torch.Tensor], ranks: int = RANKS) -> list[list[float]]:
    """Per head, per rank i < ``ranks``: how often the head's (i+1)-th token is the target's top-1 (true tokens on
    the path), the accuracies Medusa calibrates its static trees with."""
    wanted = lm_head(batch["last"]).argmax(-1)
    table = []
    for head, logits in enumerate(head_logits(heads, embed, lm_head, batch), start=1):
        ranked = heads.draft_vocab.to_target(logits.topk(min(ranks, logits.shape[-1]), dim=-1).indices)
        table.append((ranked == wanted[:, head:, None]).float().mean(dim=(0, 1)).tolist())
    return table


def head_agreement(heads: MedusaHeads, embed: nn.Module, lm_head: nn.Module,
                   batch: dict[str, torch.Tensor]) -> list[float]:
    """Per head: how often its top-1 equals the target's (true tokens on the path)."""
    return [row[0] for row in head_rank_accuracy(heads, embed, lm_head, batch, ranks=1)]


def check_own_heads_fit(arch: MedusaArch, vocab: DraftVocab, target_parameters: int) -> None:
    """Own LM heads (K x N x H) that would outweigh the whole target are refused with one line: at a large
    vocabulary the heads share the target's LM head (``own_lm_heads: false``) or own heads over a draft vocabulary."""
    own = arch.heads * vocab.size * arch.hidden_size if arch.own_lm_heads else 0
    if own > target_parameters:
        raise DraftcountError(f"medusa training: {arch.heads} own LM heads of {vocab.size} x {arch.hidden_size} hold "
                              f"{own / 1e6:.1f}M parameters, more than the target's {target_parameters / 1e6:.1f}M; "
                              "pass own_lm_heads=false (the heads share the target's LM head) or a draft_vocab")


def train_medusa(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) Medusa or Hydra heads and save them to ``request.out``."""
    options = parse_options(MedusaTrainOptions, request.options, "medusa training")
    request = budgeted(request, options)
    target = frozen_target(request)
    source = feature_source(request, target, LAYERS, options.seq_len)
    lm_head, embed = target.model.get_output_embeddings(), target.model.get_input_embeddings()
    vocab = choose_draft_vocab(options.draft_vocab, source, target)
    arch = arch_for(target.model, options.heads, options.hydra, options.own_lm_heads)
    check_own_heads_fit(arch, vocab, target.num_parameters)
    heads = new_heads(arch, lm_head, options.seed, vocab).to(target.device)
    batch_loss = lambda batch: medusa_loss(heads, embed, lm_head, batch, options)  # noqa: E731
    return train_drafter(request, options, target, source,
                         lambda: Fitted(heads, fit_drafter(heads, batch_loss, source, target, request, options)),
                         lambda module, batch: head_agreement(module, embed, lm_head, batch), save_heads,
                         lambda module, batch: {CALIBRATION: head_rank_accuracy(module, embed, lm_head, batch)})
