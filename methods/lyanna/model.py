"""The Lyanna drafter (DESIGN section 3): a hidden-state backbone plus token-information injection.

Backbone: the target's features are projected (``proj``; EAGLE-3-style fusion of
a low, middle and high layer first when asked for) and run through one decoder
layer that autoregresses on hidden states only: at a position whose feature is
known the input is the target's feature, at a speculative position it is the
backbone's own previous output. No token embedding enters it, so the K states of
a round are shared by every branch of the tree and stay valid whichever tokens
are accepted.

The backbone's layer (``backbone: eagle``) is the EAGLE head's decoder layer (``methods.eagle.head``: no input norm,
q/k/v biases for a Qwen2-family target) at its width (``head_config``: the target's attention shape, GQA included,
and MLP width); ``intermediate_size`` may set another MLP width, no rule shrinks it. ``backbone: llama``: a plain
Llama layer with an input norm (drafters written before).

Injection (``inject``):
- ``token_info`` (the paper's): logits of a node = LM-head logits of its
  depth's state + a low-rank vocabulary bias of its parent token: parent ->
  r-dim trainable embedding -> RMS-normalised -> r x N up-projection (N: the
  draft vocabulary). With ``parent_vocab: draft`` the embedding has a row per
  draft-vocabulary token and one row shared by every token outside it (a
  node's parent is a drafted token, so only a round's root can be outside);
  ``full``: a row per target token (drafters written before).
- ``feature``: the LM head applied to state + MLP([state; embedding(parent)]).

Vocabulary compression: a draft vocabulary (``draft_vocab``,
``harness.training.draft_vocab``: the most frequent training tokens) restricts
the drafter's output to those N tokens, in draft ids, through the target LM
head's rows of them (and an N-wide token-info up-projection); tokens outside it
are never drafted, which keeps verification lossless.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from harness.errors import DraftcountError
from harness.backend.kv_cache import cache_argument
from harness.backend.models import ModelCost
from harness.training.draft_vocab import DraftVocab
from harness.training.drafters import (
    check_target_fit, check_weights, head_config, init_linear_layers, read_drafter, write_drafter,
)
from harness.training.features import FeatureSpec
from methods.eagle.head import head_decoder_layer


@dataclass(frozen=True)
class LyannaArch:
    inject: Literal["token_info", "feature"] = "token_info"
    rank: int = 64  # token-info embedding width r
    fusion: Literal["none", "eagle3"] = "none"
    feature_layers: tuple[int | str, ...] = ("last",)
    intermediate_size: int = 0  # backbone MLP width; 0 = the target's (the EAGLE head's)
    parent_vocab: Literal["draft", "full"] = "draft"  # token-info rows: draft vocabulary (+1) or every token
    backbone: Literal["eagle", "llama"] = "eagle"  # the EAGLE head's decoder layer, or a plain Llama one (before)

    def __post_init__(self) -> None:
        FeatureSpec(self.fusion, self.feature_layers)
        if self.rank < 1:
            raise DraftcountError(f"token-info rank must be >= 1, got {self.rank}")

    @property
    def features(self) -> FeatureSpec:
        return FeatureSpec(self.fusion, self.feature_layers)


class LyannaModel(nn.Module):
    """Backbone + injector; the target's LM head rows (of the draft vocabulary) are a frozen buffer."""

    def __init__(self, config: LlamaConfig, arch: LyannaArch, lm_head_weight: torch.Tensor,
                 embedding: torch.Tensor, draft_vocab: DraftVocab | None) -> None:
        super().__init__()
        config._attn_implementation = "sdpa"
        self.config, self.arch = config, arch
        hidden = config.hidden_size
        self.fuse = nn.Linear(3 * hidden, hidden, bias=False) if arch.fusion == "eagle3" else None
        self.proj = nn.Linear(hidden, hidden, bias=True)
        layer = head_decoder_layer(config) if arch.backbone == "eagle" else LlamaDecoderLayer(config, layer_idx=0)
        self.layers = nn.ModuleList([layer])
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.full_vocab = int(lm_head_weight.shape[0])
        self.draft_vocab = draft_vocab or DraftVocab(self.full_vocab)
        self.register_buffer("lm_head_rows", self.draft_vocab.restrict(lm_head_weight.detach().T).T.clone(),
                             persistent=False)
        kept = self.draft_vocab.size
        if arch.inject == "token_info":
            self.register_buffer("parent_rows", parent_row_map(self.draft_vocab, arch.parent_vocab), persistent=False)
            self.parent_embed = nn.Embedding(parent_row_count(self.draft_vocab, arch.parent_vocab), arch.rank)
            self.parent_norm = nn.RMSNorm(arch.rank, eps=1e-6)
            self.parent_up = nn.Linear(arch.rank, kept, bias=False)
        else:
            self.register_buffer("token_embed", embedding.detach().clone(), persistent=False)
            self.inject_mlp = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def true_inputs(self, rows: list[torch.Tensor]) -> torch.Tensor:
        """Backbone inputs at positions whose target features are known."""
        return self.proj(self.fuse(torch.cat(rows, dim=-1)) if self.fuse is not None else rows[0])

    def own_inputs(self, states: torch.Tensor) -> torch.Tensor:
        """Backbone inputs at speculative positions: its own previous outputs."""
        return self.proj(states)

    def forward(self, inputs: torch.Tensor, position_ids: torch.Tensor, cache: DynamicCache | None = None,
                attention_bias: torch.Tensor | None = None) -> torch.Tensor:
        """(B, q, H) next-position states from projected inputs (B, q, H) at ``position_ids``."""
        rotary = self.rotary_emb(inputs, position_ids)
        out = self.layers[0](inputs, attention_mask=attention_bias, position_ids=position_ids,
                             use_cache=cache is not None, position_embeddings=rotary,
                             **cache_argument(self.layers[0], cache))
        return out[0] if isinstance(out, tuple) else out

    def state_logits(self, states: torch.Tensor) -> torch.Tensor:
        """LM-head logits (..., kept vocabulary) of backbone states, before any token information."""
        return states @ self.lm_head_rows.T

    def node_logits(self, states: torch.Tensor, parents: torch.Tensor, base: torch.Tensor | None = None) -> torch.Tensor:
        """Draft logits (..., kept vocabulary) of nodes with the given states and parent tokens.

        ``states`` (..., H) broadcasts against ``parents`` (...). ``base`` may pass
        ``state_logits(states)`` when it is already computed (token_info only).
        """
        if self.arch.inject == "token_info":
            base = self.state_logits(states) if base is None else base
            return base + self.parent_up(self.parent_norm(self.parent_embed(self.parent_rows[parents])))
        states = states.expand(*parents.shape, states.shape[-1])
        mixed = states + self.inject_mlp(torch.cat([states, self.token_embed[parents].to(states.dtype)], dim=-1))
        return self.state_logits(mixed)

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def backbone_cost(self) -> ModelCost:
        body = sum(p.numel() for m in (self.fuse, self.proj, self.layers) if m is not None for p in m.parameters())
        return ModelCost(body_params=body, head_params=int(self.lm_head_rows.numel()), num_layers=1,
                         attention_width=self.config.num_attention_heads * self.config.head_dim)

    def injection_flops(self, nodes: int) -> float:
        """FLOPs of the draft logits of ``nodes`` nodes beyond their depth's state logits."""
        kept, hidden = self.lm_head_rows.shape
        if self.arch.inject == "token_info":
            return 2.0 * nodes * self.arch.rank * kept + nodes * kept
        mlp = sum(p.numel() for p in self.inject_mlp.parameters())
        return 2.0 * nodes * (mlp + kept * hidden)


def parent_row_count(vocab: DraftVocab, parent_vocab: str) -> int:
    """Token-info rows: one per target token (``full``, or no draft vocabulary), else one per draft token + 1."""
    return vocab.target_vocab if parent_vocab == "full" or not vocab.reduced else vocab.size + 1


def parent_row_map(vocab: DraftVocab, parent_vocab: str) -> torch.Tensor:
    """Target id -> token-info row: the identity for ``full`` or an unreduced vocabulary; for ``draft``, a draft
    token's draft index, every other token the one shared row after them."""
    if parent_vocab == "full" or not vocab.reduced:
        return torch.arange(vocab.target_vocab)  # host: a buffer, moved with the module
    rows = torch.full((vocab.target_vocab,), vocab.size, dtype=torch.long)  # host: a buffer, moved with the module
    rows[vocab.token_map.cpu()] = torch.arange(vocab.size)  # host: a buffer, moved with the module
    return rows


def lyanna_config(target_config, vocab_size: int, intermediate_size: int) -> LlamaConfig:
    config = head_config(target_config, vocab_size)
    if intermediate_size:
        config.intermediate_size = intermediate_size
    return config


def new_drafter(target_model, arch: LyannaArch, draft_vocab: DraftVocab | None, seed: int) -> LyannaModel:
    """A freshly initialised drafter for ``target_model`` (its LM head and embedding stay frozen buffers)."""
    torch.manual_seed(seed)
    lm_head = target_model.get_output_embeddings().weight
    config = lyanna_config(target_model.config, int(lm_head.shape[0]), arch.intermediate_size)
    drafter = LyannaModel(config, arch, lm_head, target_model.get_input_embeddings().weight, draft_vocab)
    init_linear_layers(drafter, config.initializer_range)
    if arch.inject == "token_info":
        nn.init.zeros_(drafter.parent_up.weight)  # start as the bare state logits
    return drafter


def save_drafter(drafter: LyannaModel, out_dir: Path, provenance: dict) -> None:
    arch = {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(drafter.arch).items()}
    meta = {"arch": arch, "kept_vocabulary": drafter.draft_vocab.size,
            "trainable_parameters": drafter.trainable_parameters(), **provenance}
    write_drafter(out_dir, "lyanna", drafter.state_dict(), meta, drafter.config, drafter.draft_vocab)


def load_drafter(source: str | Path, target_model) -> LyannaModel:
    """A Lyanna drafter trained here for ``target_model``, in eval mode (the target's LM head and embedding)."""
    files = read_drafter(source, "lyanna")
    stored = {"parent_vocab": "full", "backbone": "llama", **files.meta["arch"]}  # drafters written before: their own
    arch = LyannaArch(**{**stored, "feature_layers": tuple(stored["feature_layers"])})
    config, label = files.llama_config(), f"Lyanna drafter {files.directory}"
    check_target_fit(label, config.hidden_size, config.vocab_size, target_model)
    ids = files.state.pop("vocab_ids", None)  # drafters written before the shared d2t/t2d map kept their ids
    vocab = files.draft_vocab(config.vocab_size, label) if ids is None or len(ids) == config.vocab_size else \
        DraftVocab(config.vocab_size, ids)
    drafter = LyannaModel(config, arch, target_model.get_output_embeddings().weight,
                          target_model.get_input_embeddings().weight, vocab)
    check_weights(drafter, files.state, label)
    drafter.load_state_dict(files.state)
    return drafter.eval()
