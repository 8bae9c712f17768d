"""DREAM's drafter (Hu et al., NeurIPS 2025, arXiv 2505.19201; their ``dream/model/cnets.py``): three layers over
the target's token embeddings, then the target's own LM head.

- layer 0: a self-attention decoder layer on the input embeddings (no input norm, as EAGLE's first layer);
- layer 1: a gated cross-attention layer whose keys and values are the target's last-layer features: q and k are
  RMS-normed per head, there is no rotary embedding, and the attention and MLP branches are scaled by tanh gates
  started at 0 (the layer starts as the identity);
- layer 2: a self-attention decoder layer;
- a final RMSNorm: the output is the predicted next target feature (trained by regression and through the LM head).

Slot p reads the pair (target feature f_p, token x_{p+1}) as EAGLE's head does: its query is x_{p+1}'s embedding
and its cross-attention key and value come from f_p, so the slot sees the features of slots <= p under the same
causal or tree mask as its self-attention, and a draft node's feature is its parent's predicted one. Each of the
three layers keeps its keys and values in one layer of the drafter's KV cache, so catching up, tree masks and
cropping work as they do for EAGLE. The output of layer 1 is also trained to match the target layer chosen by
attention entropy (``methods.dream.training``).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from harness.backend.forward import causal_bias
from harness.backend.kv_cache import cache_argument
from harness.backend.models import ModelCost
from harness.training.draft_vocab import DraftVocab
from harness.training.drafters import head_config, init_linear_layers
from harness.training.features import FeatureSpec
from methods.eagle.head import head_decoder_layer

LAYERS = 3
CROSS_LAYER = 1  # the cache layer the cross-attention's keys and values live in


class GatedCrossAttention(nn.Module):
    """Cross-attention of the drafter stream (queries) over the target's features (keys, values), q/k RMS-normed."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        hidden = config.hidden_size
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.q_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, hidden: torch.Tensor, features: torch.Tensor, cache: DynamicCache | None,
                attention_bias: torch.Tensor | None) -> torch.Tensor:
        batch, length, _ = hidden.shape
        query = self.q_norm(self.q_proj(hidden).view(batch, length, self.heads, self.head_dim)).transpose(1, 2)
        key = self.k_norm(self.k_proj(features).view(batch, length, self.kv_heads, self.head_dim)).transpose(1, 2)
        value = self.v_proj(features).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        if cache is not None:
            key, value = cache.update(key, value, CROSS_LAYER)
        if attention_bias is None:  # as run_drafter's None: these slots causal among themselves, earlier ones visible
            attention_bias = causal_bias(key.shape[-2] - length, length, hidden.dtype, hidden.device)
        out = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_bias,
                                                         enable_gqa=self.kv_heads != self.heads)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))


class GatedCrossLayer(nn.Module):
    """DREAM's ``LlamaCrossAttentionDecoderLayer``: x + tanh(g_a) attn(norm(x), f), then x + tanh(g_m) mlp(norm(x))."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.cross_attn = GatedCrossAttention(config)
        self.cross_attn_attn_gate = nn.Parameter(torch.zeros(1))
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config)
        self.cross_attn_mlp_gate = nn.Parameter(torch.zeros(1))

    def forward(self, hidden: torch.Tensor, features: torch.Tensor, cache: DynamicCache | None,
                attention_bias: torch.Tensor | None) -> torch.Tensor:
        attended = self.cross_attn(self.input_layernorm(hidden), features, cache, attention_bias)
        hidden = hidden + self.cross_attn_attn_gate.tanh() * attended
        return hidden + self.cross_attn_mlp_gate.tanh() * self.mlp(self.post_attention_layernorm(hidden))


def self_attention_layer(config: LlamaConfig, index: int) -> LlamaDecoderLayer:
    """DREAM's self-attention layers: layer 0 without an input norm (as EAGLE's), layer 2 a plain Llama layer."""
    return head_decoder_layer(config) if index == 0 else LlamaDecoderLayer(config, layer_idx=index)


class DreamHead(nn.Module):
    """The drafter (see the module docstring); the LM head is the target's, passed to ``logits``."""

    def __init__(self, config: LlamaConfig, draft_vocab: DraftVocab | None = None) -> None:
        super().__init__()
        config._attn_implementation = "sdpa"
        config.num_hidden_layers = LAYERS
        self.config = config
        self.draft_vocab = draft_vocab or DraftVocab(config.vocab_size)
        self.features = FeatureSpec("none", ("last",))
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList([self_attention_layer(config, 0), GatedCrossLayer(config),
                                     self_attention_layer(config, 2)])
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def input_features(self, rows: list[torch.Tensor]) -> torch.Tensor:
        return rows[0]

    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cache: DynamicCache | None = None, attention_bias: torch.Tensor | None = None,
                embeds: torch.Tensor | None = None, with_mid: bool = False):
        """(B, q, H) predicted next features for pairs (feature at p, token at p + 1) at positions p (and, with
        ``with_mid``, layer 1's output, which the entropy-chosen target layer supervises). ``embeds`` stand in for
        the tokens' embeddings (the target's own input embeddings of a prompt: an image's projected features)."""
        hidden = (self.embed_tokens(input_ids) if embeds is None else embeds).to(features.dtype)
        rotary = self.rotary_emb(hidden, position_ids)
        hidden = self._self_attention(0, hidden, position_ids, rotary, cache, attention_bias)
        mid = self.layers[CROSS_LAYER](hidden, features, cache, attention_bias)
        hidden = self._self_attention(2, mid, position_ids, rotary, cache, attention_bias)
        hidden = self.norm(hidden)
        return (hidden, mid) if with_mid else hidden

    def _self_attention(self, index: int, hidden: torch.Tensor, position_ids: torch.Tensor, rotary,
                        cache: DynamicCache | None, attention_bias: torch.Tensor | None) -> torch.Tensor:
        layer = self.layers[index]
        out = layer(hidden, attention_mask=attention_bias, position_ids=position_ids, use_cache=cache is not None,
                    position_embeddings=rotary, **cache_argument(layer, cache))
        return out[0] if isinstance(out, tuple) else out

    def logits(self, hidden: torch.Tensor, target_lm_head: nn.Module) -> torch.Tensor:
        """Through the target's LM head (its draft vocabulary's rows: draft ids)."""
        return self.draft_vocab.logits(hidden, target_lm_head)

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def cost(self, lm_head_params: int) -> ModelCost:
        body = sum(p.numel() for name, p in self.named_parameters() if not name.startswith("embed_tokens"))
        return ModelCost(body_params=body, head_params=self.draft_vocab.head_params(lm_head_params),
                         num_layers=LAYERS,
                         attention_width=self.config.num_attention_heads * self.config.head_dim)


def dream_config(target_config, vocab_size: int) -> LlamaConfig:
    """The drafter's configuration: the target's layer shape, three layers."""
    config = head_config(target_config, vocab_size)
    config.num_hidden_layers = LAYERS
    config.architectures = ["DreamDrafter"]
    return config


def new_dream_head(target: nn.Module, seed: int, draft_vocab: DraftVocab | None = None) -> DreamHead:
    """A fresh drafter for ``target`` over ``draft_vocab`` (default: the full vocabulary): its embedding the
    target's (frozen), the gates at 0."""
    torch.manual_seed(seed)
    lm_head = target.get_output_embeddings().weight
    head = DreamHead(dream_config(target.config, int(lm_head.shape[0])), draft_vocab)
    init_linear_layers(head, head.config.initializer_range)
    with torch.no_grad():
        head.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
    return head
