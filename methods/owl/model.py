"""OWL's drafter: a sum-LSTM conditioned only on the target's last-layer hidden state of the newest accepted
position (Arctic LSTM speculator equations, SEEDS.md section 5).

One step, from ``prev`` (the previous state; at step 1 the target's hidden state h_N, layer-normed and scaled by
1/sqrt(2)), the cell ``c`` (zeros at step 1) and the newest token x (the root at step 1, then the drafted token):

    z     = embedding(x), repeated 4 times
    a     = W_proj(prev) + (emb_w / state_w) * z,   state_w = 0.5^(0.5 / n_predict),
                                                     emb_w = sqrt((1 - state_w^2) * H / 2)
    f, i, o = sigmoid(a_f), sigmoid(a_i), sigmoid(a_o);  g = a_g
    c     <- c * f + GELU(LN(g)) * i
    state  = GELU(LN(c)) * o
    logits = lm_head(W_head(state))                  (the target's frozen LM head; its draft vocabulary's rows)

One cell and one head serve every step (our choice: Arctic keeps per-step projections and heads; a shared cell
drafts any depth, also past the depth it was trained for, and keeps the parameter count independent of it). The
drafter never attends over the context: its work per step and its drafts depend on h_N and the drafted tokens
alone, whatever the context length.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from harness.backend.models import ModelCost
from harness.errors import DraftcountError
from harness.training.draft_vocab import DraftVocab
from harness.training.drafters import check_target_fit, check_weights, read_drafter, write_drafter



@dataclass(frozen=True)
class OwlArch:
    hidden_size: int  # the target's width (its last hidden state feeds step 1)
    vocab_size: int  # the target's vocabulary (the drafter's embedding; logits through the target's LM head)
    n_predict: int = 5  # the depth it is trained for (sets the state/embedding weights of the sum)

    def __post_init__(self) -> None:
        if self.hidden_size < 1 or self.vocab_size < 1 or self.n_predict < 1:
            raise DraftcountError(f"OWL drafter needs positive sizes, got {asdict(self)}")

    @property
    def state_weight(self) -> float:
        return 0.5 ** (0.5 / self.n_predict)

    @property
    def embedding_weight(self) -> float:
        return math.sqrt((1 - self.state_weight**2) * self.hidden_size / 2)


@dataclass
class LstmState:
    """The drafter's recurrent state of some rows (nodes): ``state`` (n, H) and cell ``cell`` (n, H)."""

    state: torch.Tensor
    cell: torch.Tensor

    def rows(self, index: torch.Tensor) -> LstmState:
        return LstmState(self.state.index_select(0, index), self.cell.index_select(0, index))


class OwlLstm(nn.Module):
    """The sum-LSTM drafter (see the module docstring)."""

    def __init__(self, arch: OwlArch, draft_vocab: DraftVocab | None = None) -> None:
        super().__init__()
        width = arch.hidden_size
        self.arch = arch
        self.draft_vocab = draft_vocab or DraftVocab(arch.vocab_size)
        self.embedding = nn.Embedding(arch.vocab_size, width)
        self.input_norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, 4 * width, bias=False)
        self.gate_norm = nn.LayerNorm(width)
        self.cell_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, width, bias=False)
        self.token_scale = arch.embedding_weight / arch.state_weight

    def start(self, target_hidden: torch.Tensor) -> LstmState:
        """The step-1 state of rows (n, H) of the target's last hidden state: LN(h) / sqrt(2), a zero cell."""
        prev = self.input_norm(target_hidden) / math.sqrt(2.0)
        return LstmState(prev, torch.zeros_like(prev))

    def step(self, carried: LstmState, tokens: torch.Tensor) -> LstmState:
        """One sum-LSTM step of rows (..., H) fed the tokens (...)."""
        z = torch.cat([self.embedding(tokens)] * 4, dim=-1)
        forget, inner, out, gate = (self.proj(carried.state) + self.token_scale * z).chunk(4, dim=-1)
        cell = carried.cell * torch.sigmoid(forget) + F.gelu(self.gate_norm(gate)) * torch.sigmoid(inner)
        state = F.gelu(self.cell_norm(cell)) * torch.sigmoid(out)
        return LstmState(state, cell)

    def logits(self, states: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """Over the draft vocabulary (draft ids): the target LM head's rows of it."""
        return self.draft_vocab.logits(self.head(states), lm_head)

    def trainable_parameters(self) -> int:
        return sum(parameter.numel() for parameter in self.parameters() if parameter.requires_grad)

    def cost(self, lm_head_params: int) -> ModelCost:
        """FLOPs of a step: the projection and head per row, the LM head per row with logits; no attention term
        (the drafter sees no context)."""
        width = self.arch.hidden_size
        return ModelCost(body_params=4 * width * width + width * width,
                         head_params=self.draft_vocab.head_params(lm_head_params), num_layers=0, attention_width=0)


def new_lstm(arch: OwlArch, seed: int, draft_vocab: DraftVocab | None = None) -> OwlLstm:
    """A fresh drafter: every matrix Normal(0, 1/sqrt(H)) (Arctic's initialisation), layer norms at identity."""
    torch.manual_seed(seed)
    drafter = OwlLstm(arch, draft_vocab)
    std = 1 / math.sqrt(arch.hidden_size)
    for module in (drafter.embedding, drafter.proj, drafter.head):
        nn.init.normal_(module.weight, std=std)
    return drafter


def arch_for(target_model: nn.Module, n_predict: int) -> OwlArch:
    lm_head = target_model.get_output_embeddings().weight
    return OwlArch(int(lm_head.shape[1]), int(lm_head.shape[0]), n_predict)


def save_lstm(drafter: OwlLstm, out_dir: Path, provenance: dict) -> None:
    meta = {"arch": asdict(drafter.arch), "trainable_parameters": drafter.trainable_parameters(), **provenance}
    write_drafter(out_dir, "owl", drafter.state_dict(), meta, vocab=drafter.draft_vocab)


def load_lstm(source: str | Path, target_model: nn.Module) -> OwlLstm:
    """An OWL drafter trained here for ``target_model``, in eval mode."""
    files = read_drafter(source, "owl", with_config=False)
    arch, label = OwlArch(**files.meta["arch"]), f"OWL drafter {files.directory}"
    check_target_fit(label, arch.hidden_size, arch.vocab_size, target_model)
    drafter = OwlLstm(arch, files.draft_vocab(arch.vocab_size, label))
    check_weights(drafter, files.state, label)
    drafter.load_state_dict(files.state)
    return drafter.eval()
