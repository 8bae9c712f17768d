"""The DFlash and DSpark drafters' forwards, restated for the tests from the authors' code (no transformers modules).

DFlash: z-lab's ``dflash/model.py`` (``DFlashDraftModel.forward``, ``Qwen3DFlashAttention``, ``dflash_generate``'s
``lm_head(...)[:, 1 - B:]``): the fused context ``hidden_norm(fc(concat))`` enters every layer's k/v projections
before the block's, q/k per-head RMS norms, RoPE at absolute positions (queries at the block's), no mask, the
target's LM head on the mask slots. DSpark: DeepSpec's ``deepspec/modeling/dspark`` (every slot drafts; the vanilla
Markov head ``w2(w1[prev])`` added to each slot's logits; the confidence head ``sigmoid(proj([h; w1[prev]]))``).
Official weights and configs come from ``official_dflash``/``official_dspark`` with their key names.
"""

from __future__ import annotations

import math

import torch

from tests.methods.eagle_reference import mlp, rms_norm, rotary, rotate_half


def block_attention(x: torch.Tensor, context: torch.Tensor, weights: dict, prefix: str, config: dict,
                    context_positions: torch.Tensor, block_positions: torch.Tensor) -> torch.Tensor:
    """One layer's attention for block rows x (q, H) over [context (c, H); x], no mask."""
    heads, kv_heads, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    eps = config["rms_norm_eps"]
    joined = torch.cat([context, x], dim=0)
    q = (x @ weights[f"{prefix}q_proj.weight"].T).view(-1, heads, head_dim)
    k = (joined @ weights[f"{prefix}k_proj.weight"].T).view(-1, kv_heads, head_dim)
    v = (joined @ weights[f"{prefix}v_proj.weight"].T).view(-1, kv_heads, head_dim)
    q, k = rms_norm(q, weights[f"{prefix}q_norm.weight"], eps), rms_norm(k, weights[f"{prefix}k_norm.weight"], eps)
    theta = config["rope_theta"]
    cos_q, sin_q = rotary(head_dim, theta, block_positions)
    cos_k, sin_k = rotary(head_dim, theta, torch.cat([context_positions, block_positions]))
    q = q * cos_q[:, None] + rotate_half(q) * sin_q[:, None]
    k = k * cos_k[:, None] + rotate_half(k) * sin_k[:, None]
    k, v = k.repeat_interleave(heads // kv_heads, dim=1), v.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim)
    out = torch.einsum("hqk,khd->qhd", torch.softmax(scores.float(), dim=-1), v).reshape(x.shape[0], -1)
    return out @ weights[f"{prefix}o_proj.weight"].T


def dflash_forward(weights: dict, config: dict, target_states: torch.Tensor, block_embeddings: torch.Tensor,
                   context_positions: torch.Tensor, block_positions: torch.Tensor) -> torch.Tensor:
    """(q, H) normed outputs of the block for the whole context's target states (c, n x H)."""
    eps = config["rms_norm_eps"]
    context = rms_norm(target_states @ weights["fc.weight"].T, weights["hidden_norm.weight"], eps)
    hidden = block_embeddings
    for layer in range(config["num_hidden_layers"]):
        prefix = f"layers.{layer}."
        normed = rms_norm(hidden, weights[f"{prefix}input_layernorm.weight"], eps)
        hidden = hidden + block_attention(normed, context, weights, f"{prefix}self_attn.", config, context_positions,
                                          block_positions)
        hidden = hidden + mlp(rms_norm(hidden, weights[f"{prefix}post_attention_layernorm.weight"], eps), weights,
                              f"{prefix}mlp.")
    return rms_norm(hidden, weights["norm.weight"], eps)


def dspark_slots(weights: dict, hidden: torch.Tensor, base_logits: torch.Tensor,
                 previous: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(corrected logits, confidence) of DeepSpec's vanilla Markov head and confidence head (with Markov)."""
    embedded = weights["markov_head.markov_w1.weight"][previous]
    logits = base_logits + embedded @ weights["markov_head.markov_w2.weight"].T
    joined = torch.cat([hidden, embedded], dim=-1)
    confidence = torch.sigmoid(joined @ weights["confidence_head.proj.weight"].T + weights["confidence_head.proj.bias"])
    return logits, confidence[..., 0]


def official_config(hidden: int, heads: int, kv_heads: int, layers: int, block: int, vocab: int,
                    target_layers: list[int], mask_token: int, target_depth: int) -> dict:
    """A z-lab style config.json (Qwen3 fields, ``block_size``, ``dflash_config``)."""
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": hidden,
            "intermediate_size": 2 * hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": hidden // heads, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "max_position_embeddings": 512, "vocab_size": vocab, "attention_bias": False, "block_size": block,
            "num_target_layers": target_depth,
            "dflash_config": {"mask_token_id": mask_token, "target_layer_ids": target_layers}}


def official_dflash(config: dict, seed: int) -> dict[str, torch.Tensor]:
    """Random weights under z-lab's names for ``config``."""
    generator = torch.Generator().manual_seed(seed)
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    heads, kv_heads, inner = config["num_attention_heads"], config["num_key_value_heads"], config["intermediate_size"]
    context = len(config["dflash_config"]["target_layer_ids"])

    def rand(*shape: int, scale: float = 0.2) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * scale

    def norm(size: int) -> torch.Tensor:
        return 1.0 + rand(size, scale=0.1)

    weights = {"fc.weight": rand(hidden, context * hidden), "hidden_norm.weight": norm(hidden),
               "norm.weight": norm(hidden)}
    for layer in range(config["num_hidden_layers"]):
        prefix = f"layers.{layer}."
        weights.update({
            f"{prefix}input_layernorm.weight": norm(hidden), f"{prefix}post_attention_layernorm.weight": norm(hidden),
            f"{prefix}self_attn.q_proj.weight": rand(heads * head_dim, hidden),
            f"{prefix}self_attn.k_proj.weight": rand(kv_heads * head_dim, hidden),
            f"{prefix}self_attn.v_proj.weight": rand(kv_heads * head_dim, hidden),
            f"{prefix}self_attn.o_proj.weight": rand(hidden, heads * head_dim),
            f"{prefix}self_attn.q_norm.weight": norm(head_dim), f"{prefix}self_attn.k_norm.weight": norm(head_dim),
            f"{prefix}mlp.gate_proj.weight": rand(inner, hidden), f"{prefix}mlp.up_proj.weight": rand(inner, hidden),
            f"{prefix}mlp.down_proj.weight": rand(hidden, inner),
        })
    return weights


def official_dspark(config: dict, rank: int, seed: int, embedding: torch.Tensor,
                    lm_head: torch.Tensor) -> tuple[dict, dict[str, torch.Tensor]]:
    """A DeepSpec DSpark config (top-level fields) and random weights under its names (with the frozen copies of
    the target's embedding and LM head DeepSpec ships)."""
    fields = {key: value for key, value in config.items() if key != "dflash_config"}
    fields.update({"architectures": ["Qwen3DSparkModel"], "mask_token_id": config["dflash_config"]["mask_token_id"],
                   "target_layer_ids": config["dflash_config"]["target_layer_ids"], "markov_rank": rank,
                   "markov_head_type": "vanilla", "enable_confidence_head": True, "confidence_head_with_markov": True})
    generator = torch.Generator().manual_seed(seed + 1)
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    weights = {**official_dflash(config, seed), "embed_tokens.weight": embedding.clone(),
               "lm_head.weight": lm_head.clone(),
               "markov_head.markov_w1.weight": torch.randn(vocab, rank, generator=generator) * 0.3,
               "markov_head.markov_w2.weight": torch.randn(vocab, rank, generator=generator) * 0.3,
               "confidence_head.proj.weight": torch.randn(1, hidden + rank, generator=generator) * 0.3,
               "confidence_head.proj.bias": torch.randn(1, generator=generator)}
    return fields, weights
