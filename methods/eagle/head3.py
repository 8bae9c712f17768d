"""The EAGLE-3 draft head, in the layout the EAGLE authors release (their ``eagle/model/cnets.py``).

    f = fc([target layer 2; layer L//2; layer L-3])            (3 x target width -> width; no bias)
    h = f + attention([input_layernorm(embed(x)); hidden_norm(f)])   (q/k/v read 2 x width)
    out = h + mlp(post_attention_layernorm(h))                   (``midlayer.*``)
    logits = lm_head(norm(out))                                  (its own head, over draft_vocab_size tokens)

A draft-vocabulary index d stands for the target token ``d + d2t[d]`` (``harness.training.draft_vocab``: the maps
are the head's ``draft_vocab``, written as ``d2t``/``t2d``); ``logits`` returns draft ids, which the adapter maps to
target ids. Deeper tree nodes feed the head its own output ``out`` (already ``width`` wide, so ``fc`` is skipped),
as the official drafter does. The token embedding is the target's (frozen), unless the checkpoint has its own.
Heads trained here (``fusion: eagle3``) use this layout with the full vocabulary or ``draft_vocab: N``.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from harness.backend.kv_cache import cache_argument
from harness.backend.models import ModelCost
from harness.training.draft_vocab import DraftVocab
from harness.training.features import FeatureSpec


class Eagle3Layer(nn.Module):
    """``midlayer``: one decoder layer whose attention reads the normed embedding and feature side by side."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        width, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = LlamaAttention(config, layer_idx=0)
        for name in ("q_proj", "k_proj", "v_proj"):  # the attention input is [embedding; feature]
            old = getattr(self.self_attn, name)
            setattr(self.self_attn, name, nn.Linear(2 * width, old.out_features, bias=False))
        self.mlp = LlamaMLP(config)
        self.hidden_norm = LlamaRMSNorm(width, eps=eps)
        self.input_layernorm = LlamaRMSNorm(width, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(width, eps=eps)

    def forward(self, embedded: torch.Tensor, features: torch.Tensor, attention_bias: torch.Tensor | None,
                rotary: tuple[torch.Tensor, torch.Tensor], cache: DynamicCache | None) -> torch.Tensor:
        joined = torch.cat([self.input_layernorm(embedded), self.hidden_norm(features)], dim=-1)
        attended, _ = self.self_attn(hidden_states=joined, position_embeddings=rotary, attention_mask=attention_bias,
                                     **cache_argument(self.self_attn, cache))
        hidden = features + attended
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class Eagle3Head(nn.Module):
    """The EAGLE-3 head (see the module docstring); the same calls as ``EagleHead``."""

    def __init__(self, config: LlamaConfig, features: FeatureSpec, target_hidden: int, target_vocab: int,
                 draft_vocab: DraftVocab | None = None) -> None:
        super().__init__()
        config._attn_implementation = "sdpa"
        self.config = config
        self.features = features
        self.target_vocab = target_vocab
        width = config.hidden_size
        self.draft_vocab = draft_vocab or DraftVocab(target_vocab)
        self.embed_tokens = nn.Embedding(target_vocab, width)
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(len(features.layers) * target_hidden, width, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = LlamaRMSNorm(width, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(width, self.draft_vocab.size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def input_features(self, rows: list[torch.Tensor]) -> torch.Tensor:
        """``fc`` over the target's chosen layers, concatenated in layer order."""
        return self.fc(torch.cat(rows, dim=-1))

    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cache: DynamicCache | None = None, attention_bias: torch.Tensor | None = None) -> torch.Tensor:
        """(B, q, width) outputs for pairs (feature at p, token at p + 1) at positions p."""
        embedded = self.embed_tokens(input_ids).to(features.dtype)
        rotary = self.rotary_emb(features, position_ids)
        return self.midlayer(embedded, features, attention_bias, rotary, cache)

    def logits(self, hidden: torch.Tensor, target_lm_head: nn.Module | None = None) -> torch.Tensor:
        """Logits over the draft vocabulary (draft ids; ``draft_vocab`` maps them): the head's own LM head."""
        return self.lm_head(self.norm(hidden))

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def cost(self, lm_head_params: int) -> ModelCost:
        """FLOP model: fc, the layer and the draft vocabulary's head (``lm_head_params``, the target's, unused)."""
        body = sum(p.numel() for name, p in self.named_parameters()
                   if not name.startswith(("embed_tokens", "lm_head")) and p.dim() > 1)
        return ModelCost(body_params=body, head_params=self.lm_head.weight.numel(), num_layers=1,
                         attention_width=self.config.num_attention_heads * self.midlayer.self_attn.head_dim)
