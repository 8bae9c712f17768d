"""The DFlash drafter network, in the layout z-lab releases (their ``dflash/model.py``, Qwen3-style layers).

    context = hidden_norm(fc([target layer l_1; ...; l_n]))       (n x target width -> width, no bias)
    h_0     = embed([x_p, MASK, ..., MASK])                        (the target's embedding; B positions p..p+B-1)
    layer:  a = input_layernorm(h)
            q = q_norm(q_proj(a)),  k = k_norm(k_proj([context; a])),  v = v_proj([context; a])
            h = h + o_proj(attention(q, k, v))                     (RoPE at each row's position; no causal mask)
            h = h + mlp(post_attention_layernorm(h))
    logits  = lm_head(norm(h))[1:]                                 (the target's LM head: position p + i drafts x_{p+i})

``target_layer_ids`` are 0-based decoder layers as in z-lab's config (hidden state ``id + 1`` of a forward, our
1-based feature layer ``id + 1``). The context keys and values of each step are kept in a KV cache (the block's
are dropped after the step), so a step feeds only the positions accepted since the last one. With no mask token
in the target's vocabulary the drafter learns its own mask embedding (``mask_embedding``). The embedding and the LM
head are the target's unless the config says ``own_embedding`` / ``own_lm_head`` (trained copies of the target's).
Over a draft vocabulary (``harness.training.draft_vocab``) the logits are over its N tokens, in draft ids: the
target LM head's rows of them, or an own head of N rows.

DeepSpec's drafters (DFlash and DSpark, ``anchor_predicts``) read every slot instead: slot k drafts x_{p+k+1}, so a
block of B inputs drafts B tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, rotate_half

from harness.backend.models import ModelCost
from harness.training.draft_vocab import DraftVocab
from harness.training.features import FeatureSpec


def default_target_layers(target_layers: int, count: int) -> tuple[int, ...]:
    """z-lab's choice of ``count`` target layers (0-based): evenly spaced over 1..L-3, the middle one alone for a
    count of 1. Targets too shallow for that span (test models) spread them over 0..L-1."""
    if count == 1:
        return (target_layers // 2,)
    start, end = (1, target_layers - 3) if target_layers - 4 >= count - 1 else (0, target_layers - 1)
    return tuple(dict.fromkeys(int(round(start + index * (end - start) / (count - 1))) for index in range(count)))


def rotate(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on (B, heads, T, d) at the positions ``cos``/``sin`` (B, T, d) stand for."""
    cos, sin = cos[:, None], sin[:, None]
    return states * cos + rotate_half(states) * sin


class DFlashAttention(nn.Module):
    """Queries from the block; keys and values from the context rows, then the block's (see the module docstring)."""

    def __init__(self, config: LlamaConfig, layer_idx: int) -> None:
        super().__init__()
        width, heads = config.hidden_size, config.num_attention_heads
        self.head_dim = int(getattr(config, "head_dim", None) or width // heads)
        self.kv_heads = int(config.num_key_value_heads or heads)
        self.layer_idx = layer_idx
        bias = bool(getattr(config, "attention_bias", False))
        self.q_proj = nn.Linear(width, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * self.head_dim, width, bias=bias)
        self.q_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, block: torch.Tensor, context: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor | None, cache: DynamicCache | None) -> torch.Tensor:
        batch, length, _ = block.shape
        joined = torch.cat([context, block], dim=1)
        query = self.q_norm(self.q_proj(block).view(batch, length, -1, self.head_dim)).transpose(1, 2)
        key = self.k_norm(self.k_proj(joined).view(batch, joined.shape[1], -1, self.head_dim)).transpose(1, 2)
        value = self.v_proj(joined).view(batch, joined.shape[1], -1, self.head_dim).transpose(1, 2)
        cos, sin = rotary
        query, key = rotate(query, cos[:, -length:], sin[:, -length:]), rotate(key, cos, sin)
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        attended = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=self.head_dim**-0.5,
                                                  enable_gqa=self.kv_heads != query.shape[1])
        return self.o_proj(attended.transpose(1, 2).reshape(batch, length, -1))


class DFlashLayer(nn.Module):
    def __init__(self, config: LlamaConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = DFlashAttention(config, layer_idx)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden: torch.Tensor, context: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor | None, cache: DynamicCache | None) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), context, rotary, mask, cache)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class DFlashDrafter(nn.Module):
    """The drafter (see the module docstring). ``config`` holds its layers' shape and ``block_size``."""

    def __init__(self, config: LlamaConfig, target_layer_ids: tuple[int, ...], mask_token_id: int | None,
                 target_hidden: int, anchor_predicts: bool = False, draft_vocab: DraftVocab | None = None) -> None:
        super().__init__()
        self.anchor_predicts = anchor_predicts
        config._attn_implementation = "sdpa"
        self.config = config
        self.target_layer_ids = tuple(int(layer) for layer in target_layer_ids)
        self.features = FeatureSpec("dflash", tuple(layer + 1 for layer in self.target_layer_ids))
        self.mask_token_id = mask_token_id
        self.block_size = int(config.block_size)
        width = config.hidden_size
        self.layers = nn.ModuleList(DFlashLayer(config, index) for index in range(config.num_hidden_layers))
        self.fc = nn.Linear(len(self.target_layer_ids) * target_hidden, width, bias=False)
        self.hidden_norm = LlamaRMSNorm(width, eps=config.rms_norm_eps)
        self.norm = LlamaRMSNorm(width, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)
        if mask_token_id is None:
            self.mask_embedding = nn.Parameter(torch.zeros(width))
        else:  # the mask token's id where the model lives (made once: a graphed draft creates no host tensor)
            self.register_buffer("mask_id", torch.tensor(int(mask_token_id)), persistent=False)
        vocab = int(config.vocab_size)
        self.draft_vocab = draft_vocab or DraftVocab(vocab)
        self.embed_tokens = nn.Embedding(vocab, width) if getattr(config, "own_embedding", False) else None
        self.lm_head = (nn.Linear(width, self.draft_vocab.size, bias=False) if getattr(config, "own_lm_head", False)
                        else None)

    def input_embedding(self, target_embedding: nn.Module) -> nn.Module:
        """The embedding the block goes through: the drafter's own (``own_embedding``), else the target's."""
        return self.embed_tokens if self.embed_tokens is not None else target_embedding

    def logits(self, hidden: torch.Tensor, target_head: nn.Module) -> torch.Tensor:
        """The drafting slots' logits over the draft vocabulary (draft ids): the drafter's own LM head
        (``own_lm_head``), else the target's rows."""
        return self.lm_head(hidden) if self.lm_head is not None else self.draft_vocab.logits(hidden, target_head)

    def drafts_per_block(self, block_size: int) -> int:
        """Tokens one forward over a block of ``block_size`` inputs drafts."""
        return block_size if self.anchor_predicts else block_size - 1

    def draft_rows(self, hidden: torch.Tensor) -> torch.Tensor:
        """The block outputs (..., B, width) that draft: the mask slots (z-lab), or every slot (DeepSpec)."""
        return hidden if self.anchor_predicts else hidden[..., 1:, :]

    def context(self, rows: list[torch.Tensor]) -> torch.Tensor:
        """The injected context: ``hidden_norm(fc(...))`` of the target layers' states, concatenated in order."""
        return self.hidden_norm(self.fc(torch.cat(rows, dim=-1)))

    def block_embeddings(self, root_embedding: torch.Tensor, embed: nn.Module, length: int) -> torch.Tensor:
        """(..., length, width): the root's embedding, then the mask's (a vocabulary token's, or the learned one)."""
        if self.mask_token_id is None:
            mask = self.mask_embedding.to(root_embedding.dtype)
        else:
            mask = embed(self.mask_id.to(root_embedding.device)).to(root_embedding.dtype)
        masks = mask.expand(*root_embedding.shape[:-1], length - 1, -1)
        return torch.cat([root_embedding.unsqueeze(-2), masks], dim=-2)

    def forward(self, context: torch.Tensor, block: torch.Tensor, position_ids: torch.Tensor,
                cache: DynamicCache | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, width) normed outputs of the block rows. ``context`` (B, C, width) are new context rows (after
        those in ``cache``), ``position_ids`` (B, C + T) the positions of the context rows, then the block's."""
        rotary = self.rotary_emb(block, position_ids)
        hidden = block
        for layer in self.layers:
            hidden = layer(hidden, context, rotary, mask, cache)
        return self.norm(hidden)

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def cost(self, lm_head_params: int) -> ModelCost:
        """FLOP model: the layers and ``fc`` per row (an over-estimate for context rows, which skip the queries
        and the MLP), the LM head (``lm_head_params``: the target's, of which it drafts with its draft vocabulary's
        rows) on the drafted rows."""
        body = sum(p.numel() for name, p in self.named_parameters()
                   if p.dim() > 1 and not name.startswith(("embed_tokens", "lm_head")))
        return ModelCost(body_params=body, head_params=self.draft_vocab.head_params(lm_head_params),
                         num_layers=len(self.layers),
                         attention_width=self.config.num_attention_heads * self.layers[0].self_attn.head_dim)
