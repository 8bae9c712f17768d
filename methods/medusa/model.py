"""Medusa and Hydra heads over the target's last hidden state.

Head k (1-based, predicting x_{p+1+k} from h_p) is Medusa's residual block followed by an LM head:

    medusa:  u_k = h + SiLU(W_k h)
    hydra:   u_k = h + SiLU(W_k [h; E(x_{p+1}); ...; E(x_{p+k})])    (E: the target's frozen input embeddings)
    logits_k = L_k u_k

W_k starts at zero, so an untrained head predicts what the target's LM head does; L_k is the head's own LM head,
started from the target's (Medusa-1), or the target's frozen one (``own_lm_heads: false``), which every head shares.
Over a draft vocabulary (``harness.training.draft_vocab``) L_k has its N rows: an own head N x H, a shared one the
target's rows of those tokens. A Medusa head may apply its block ``block_repeats`` times (the released code's
``medusa_num_layers`` repeats one block). Directories (ours and Medusa's released layout):
``methods.medusa.checkpoint``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
import torch
import torch.nn.functional as F
from torch import nn

from harness.backend.models import ModelCost
from harness.errors import DraftcountError
from harness.training.draft_vocab import DraftVocab


@dataclass(frozen=True)
class MedusaArch:
    hidden_size: int  # the target's width
    vocab_size: int  # the target's vocabulary
    heads: int = 5  # K: the deepest draft it can make
    hydra: bool = False  # heads conditioned on the drafted path's embeddings
    own_lm_heads: bool = True  # each head its own LM head (Medusa-1), else the target's
    block_repeats: int = 1  # times a Medusa head applies its block (released Medusa: medusa_num_layers)

    def __post_init__(self) -> None:
        if self.hidden_size < 1 or self.vocab_size < 1 or self.heads < 1 or self.block_repeats < 1:
            raise DraftcountError(f"Medusa heads need positive sizes, got {asdict(self)}")
        if self.hydra and self.block_repeats != 1:
            raise DraftcountError("Hydra heads apply their block once (block_repeats 1)")

    def block_inputs(self, head: int) -> int:
        return self.hidden_size * (1 + head if self.hydra else 1)


class MedusaHeads(nn.Module):
    """K Medusa (or Hydra) heads (see the module docstring)."""

    def __init__(self, arch: MedusaArch, draft_vocab: DraftVocab | None = None) -> None:
        super().__init__()
        self.arch = arch
        self.draft_vocab = draft_vocab or DraftVocab(arch.vocab_size)
        self.rank_accuracy: list[list[float]] | None = None  # per head, per rank (a calibration; see checkpoint)
        self.blocks = nn.ModuleList(nn.Linear(arch.block_inputs(head), arch.hidden_size)
                                    for head in range(1, arch.heads + 1))
        self.lm_heads = nn.ModuleList(nn.Linear(arch.hidden_size, self.draft_vocab.size, bias=False)
                                      for _ in range(arch.heads if arch.own_lm_heads else 0))

    def hidden(self, head: int, state: torch.Tensor, path: torch.Tensor | None = None) -> torch.Tensor:
        """Head ``head``'s residual block on rows ``state`` (..., H); Hydra: ``path`` (..., head, H) holds the
        embeddings of the root and the drafted tokens above the predicted one."""
        if self.arch.hydra:
            return state + F.silu(self.blocks[head - 1](torch.cat([state, path.flatten(-2)], dim=-1)))
        for _ in range(self.arch.block_repeats):
            state = state + F.silu(self.blocks[head - 1](state))
        return state

    def logits(self, head: int, hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """Head ``head``'s logits over the draft vocabulary (draft ids): its own LM head, or the target's rows."""
        if self.arch.own_lm_heads:
            return self.lm_heads[head - 1](hidden)
        return self.draft_vocab.logits(hidden, lm_head)

    def trainable_parameters(self) -> int:
        return sum(parameter.numel() for parameter in self.parameters() if parameter.requires_grad)

    def cost(self, head: int, lm_head_params: int) -> ModelCost:
        """FLOPs of head ``head`` per row: its block and its LM head; no attention (the heads see no context)."""
        body = self.arch.block_inputs(head) * self.arch.hidden_size * self.arch.block_repeats
        return ModelCost(body_params=body, head_params=self.draft_vocab.head_params(lm_head_params), num_layers=0,
                         attention_width=0)


def new_heads(arch: MedusaArch, lm_head: nn.Module, seed: int, draft_vocab: DraftVocab | None = None) -> MedusaHeads:
    """Fresh heads over ``draft_vocab`` (default: the full vocabulary): blocks at zero (each head starts as the
    target's next-token prediction), own LM heads copied from the target's (its rows of the draft vocabulary)."""
    torch.manual_seed(seed)
    heads = MedusaHeads(arch, draft_vocab)
    for block in heads.blocks:
        nn.init.zeros_(block.weight)
        nn.init.zeros_(block.bias)
    for own in heads.lm_heads:
        own.weight.data.copy_(heads.draft_vocab.restrict(lm_head.weight.data.T).T)
    return heads


def arch_for(target_model: nn.Module, heads: int, hydra: bool, own_lm_heads: bool) -> MedusaArch:
    weight = target_model.get_output_embeddings().weight
    return MedusaArch(int(weight.shape[1]), int(weight.shape[0]), heads, hydra, own_lm_heads)
