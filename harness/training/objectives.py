"""Drafter training objectives: the loss every depth of a drafter's unrolled steps is trained with, and
optionally a tree-level loss added to it.

``OBJECTIVES`` names them; a ``drafters:`` entry of the workflow config selects one (``objective: <name>``, passed
to the trainer as the option ``objective``), and every drafter trainer reads its token loss through
``token_loss``. An objective with ``tree_loss`` set also adds a loss over the drafter's decoding trees
(``gto``: Group Tree Optimization, ``harness.training.gto``); trainers ask ``uses_tree_loss``. A new per-token
objective is one function here and one entry in the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.errors import DraftcountError

TokenLoss = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def soft_cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over positions of -sum_v p(v) log q(v), where q = softmax(logits); ``mask`` keeps positions."""
    loss = -(target_probs * torch.log_softmax(logits.float(), dim=-1)).sum(dim=-1)
    if mask is None:
        return loss.mean()
    return (loss * mask).sum() / mask.sum().clamp(min=1)


@dataclass(frozen=True)
class Objective:
    """summary: one line for the docs. token_loss(drafter logits (..., V), target probabilities (..., V), mask of
    the positions that count or None) -> scalar loss. tree_loss: the trainer adds a tree-level loss over the
    drafter's decoding trees (``harness.training.gto``) to the token loss."""

    summary: str
    token_loss: TokenLoss
    tree_loss: bool = False


DEFAULT_OBJECTIVE = "token"
OBJECTIVES: dict[str, Objective] = {
    "token": Objective("soft cross-entropy against the target's next-token distribution at every depth",
                       soft_cross_entropy),
    "gto": Objective("Group Tree Optimization (arXiv 2509.22134): the token loss plus a PPO-clipped reward of the "
                     "decoding trees' expected acceptance length, fine-tuning a trained drafter (init=)",
                     soft_cross_entropy, tree_loss=True),
}


def check_objective(name: str) -> None:
    if name not in OBJECTIVES:
        raise DraftcountError(f"unknown training objective {name!r}; known objectives: {', '.join(OBJECTIVES)}")


def token_loss(name: str) -> TokenLoss:
    """The token loss of objective ``name``; a one-line error naming the known ones otherwise."""
    check_objective(name)
    return OBJECTIVES[name].token_loss


def uses_tree_loss(name: str) -> bool:
    """Whether objective ``name`` adds a tree-level loss (``harness.training.gto``) to its token loss."""
    check_objective(name)
    return OBJECTIVES[name].tree_loss
