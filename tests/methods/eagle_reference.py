"""The EAGLE authors' draft-head forwards, restated from their code for the tests (no transformers modules).

EAGLE-3: ``eagle/model/cnets.py`` (``Model.forward`` + ``LlamaDecoderLayeremb`` + ``topK_genrate``'s
``lm_head(norm(.))`` and ``d2t``). EAGLE-1/2: ``eagle/model/cnets1.py`` (``fc`` over [embedding; feature], a decoder
layer without input norm, the target's LM head; ``qkv_bias`` for Qwen2 heads). Rotary tables, the causal mask
(float32 min), fp32 softmax and the attention arithmetic follow those files; nothing here is imported from them.
Official weights and configs come from ``official_state``/``official_config`` with their key names.
"""

from __future__ import annotations

import math

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.to(torch.float32)
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(head_dim: int, theta: float, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.einsum("i,j->ij", torch.arange(int(positions.max()) + 1).float(), inv_freq)
    table = torch.cat((freqs, freqs), dim=-1)
    return table.cos()[positions], table.sin()[positions]


def attention(x: torch.Tensor, weights: dict, prefix: str, config: dict, positions: torch.Tensor,
              mask: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None):
    """One attention block over x (B, q, in); ``mask`` (q, past + q) additive; returns (out, (keys, values))."""
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config["hidden_size"] // heads
    batch, length, _ = x.shape

    def project(name: str, count: int) -> torch.Tensor:
        out = x @ weights[f"{prefix}{name}.weight"].T
        if f"{prefix}{name}.bias" in weights:
            out = out + weights[f"{prefix}{name}.bias"]
        return out.view(batch, length, count, head_dim).transpose(1, 2)

    q, k, v = project("q_proj", heads), project("k_proj", kv_heads), project("v_proj", kv_heads)
    cos, sin = rotary(head_dim, config.get("rope_theta", 10000.0), positions)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    present = (k, v)
    k, v = k.repeat_interleave(heads // kv_heads, dim=1), v.repeat_interleave(heads // kv_heads, dim=1)
    scores = q @ k.transpose(2, 3) / math.sqrt(head_dim) + mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = (probs @ v).transpose(1, 2).reshape(batch, length, heads * head_dim)
    return out @ weights[f"{prefix}o_proj.weight"].T, present


def mlp(x: torch.Tensor, weights: dict, prefix: str) -> torch.Tensor:
    gate = x @ weights[f"{prefix}gate_proj.weight"].T
    return (torch.nn.functional.silu(gate) * (x @ weights[f"{prefix}up_proj.weight"].T)) @ weights[
        f"{prefix}down_proj.weight"].T


def causal_mask(length: int, past: int) -> torch.Tensor:
    mask = torch.full((length, past + length), torch.finfo(torch.float32).min)
    for row in range(length):
        mask[row, : past + row + 1] = 0
    return mask


def eagle3_forward(weights: dict, config: dict, features: torch.Tensor, tokens: torch.Tensor, embedding: torch.Tensor,
                   positions: torch.Tensor, mask: torch.Tensor, past=None):
    """cnets.py ``Model.forward``: (B, q, 3 x target width or width) features, tokens (B, q) -> (out, present)."""
    embedded = embedding[tokens]
    hidden = features @ weights["fc.weight"].T if features.shape[-1] != config["hidden_size"] else features
    eps = config["rms_norm_eps"]
    joined = torch.cat([rms_norm(embedded, weights["midlayer.input_layernorm.weight"], eps),
                        rms_norm(hidden, weights["midlayer.hidden_norm.weight"], eps)], dim=-1)
    attended, present = attention(joined, weights, "midlayer.self_attn.", config, positions, mask, past)
    hidden = hidden + attended
    hidden = hidden + mlp(rms_norm(hidden, weights["midlayer.post_attention_layernorm.weight"], eps), weights,
                          "midlayer.mlp.")
    return hidden, present


def eagle3_logits(weights: dict, config: dict, hidden: torch.Tensor) -> torch.Tensor:
    """``lm_head(norm(hidden))`` over the draft vocabulary, placed at target ids ``d + d2t[d]``."""
    draft = rms_norm(hidden, weights["norm.weight"], config["rms_norm_eps"]) @ weights["lm_head.weight"].T
    full = torch.full((*draft.shape[:-1], config["vocab_size"]), float("-inf"))
    ids = torch.arange(draft.shape[-1]) + weights["d2t"]
    full[..., ids] = draft
    return full


def eagle12_forward(weights: dict, config: dict, features: torch.Tensor, tokens: torch.Tensor,
                    embedding: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, past=None):
    """cnets1.py ``Model.forward`` with one layer: fc([embedding; feature]) -> layer 0 (no input norm)."""
    hidden = torch.cat([embedding[tokens], features], dim=-1) @ weights["fc.weight"].T
    if "fc.bias" in weights:
        hidden = hidden + weights["fc.bias"]
    attended, present = attention(hidden, weights, "layers.0.self_attn.", config, positions, mask, past)
    hidden = hidden + attended
    hidden = hidden + mlp(rms_norm(hidden, weights["layers.0.post_attention_layernorm.weight"],
                                   config["rms_norm_eps"]), weights, "layers.0.mlp.")
    return hidden, present


def official_config(kind: str, hidden: int, heads: int, kv_heads: int, vocab: int, draft_vocab: int = 0) -> dict:
    """config.json as the EAGLE authors ship it (field names of their released heads)."""
    config = {"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": hidden,
              "intermediate_size": 2 * hidden, "max_position_embeddings": 2048, "model_type": "llama",
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "num_hidden_layers": 1,
              "pad_token_id": 0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float16",
              "transformers_version": "4.28.1", "use_cache": True, "vocab_size": vocab, "initializer_range": 0.02}
    if kind == "eagle3":
        config.update(rope_theta=500000.0, draft_vocab_size=draft_vocab or vocab)
    elif kind == "llama3":
        config.update(rope_theta=500000.0, bias=False)
    elif kind == "qwen2":
        config.update(rope_theta=1000000.0, qkv_bias=True, model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    return config


def official_state(kind: str, config: dict, target_hidden: int, seed: int, with_embedding: bool) -> dict:
    """Random weights under the official key names (the released heads' ``pytorch_model.bin`` keys)."""
    generator = torch.Generator().manual_seed(seed)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv = config["num_key_value_heads"] * hidden // heads
    inter, vocab = config["intermediate_size"], config["vocab_size"]

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * 0.2

    if kind == "eagle3":
        prefix, attn_in = "midlayer.", 2 * hidden
    else:
        prefix, attn_in = "layers.0.", hidden
    state = {f"{prefix}self_attn.q_proj.weight": rand(hidden, attn_in), f"{prefix}self_attn.k_proj.weight": rand(kv, attn_in),
             f"{prefix}self_attn.v_proj.weight": rand(kv, attn_in), f"{prefix}self_attn.o_proj.weight": rand(hidden, hidden),
             f"{prefix}mlp.gate_proj.weight": rand(inter, hidden), f"{prefix}mlp.up_proj.weight": rand(inter, hidden),
             f"{prefix}mlp.down_proj.weight": rand(hidden, inter),
             f"{prefix}post_attention_layernorm.weight": 1 + rand(hidden)}
    if kind == "eagle3":
        draft_vocab = config["draft_vocab_size"]
        kept = torch.sort(torch.randperm(vocab, generator=generator)[:draft_vocab]).values
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[kept] = True
        state.update({"fc.weight": rand(hidden, 3 * target_hidden), "midlayer.hidden_norm.weight": 1 + rand(hidden),
                      "midlayer.input_layernorm.weight": 1 + rand(hidden), "norm.weight": 1 + rand(hidden),
                      "lm_head.weight": rand(draft_vocab, hidden), "d2t": kept - torch.arange(draft_vocab), "t2d": t2d})
    else:
        state["fc.weight"] = rand(hidden, 2 * hidden)
        if kind in ("vicuna", "qwen2"):
            state["fc.bias"] = rand(hidden)
        if kind == "qwen2":
            for name in ("q_proj", "k_proj", "v_proj"):
                state[f"layers.0.self_attn.{name}.bias"] = rand(state[f"layers.0.self_attn.{name}.weight"].shape[0])
    if with_embedding:
        state["embed_tokens.weight"] = rand(vocab, hidden)
    return state
