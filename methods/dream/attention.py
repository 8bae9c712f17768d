"""A target layer's attention probabilities, recomputed from the layer's input (its hidden states): what DREAM reads
of the target's attention -- the attention an image position receives (which visual tokens the drafter keeps) and
each position's attention entropy (which layer's features supervise the drafter's middle layer). Recomputing from
hidden states serves SDPA and eager targets alike; a layout without Llama-style q/k projections and rotary
embedding is refused with one line."""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from harness.errors import DraftcountError


def language_layers(model: nn.Module) -> tuple[nn.ModuleList, nn.Module]:
    """The decoder layers and rotary embedding of ``model``'s language model, or one line naming what is missing."""
    language = model.get_decoder()
    layers, rotary = getattr(language, "layers", None), getattr(language, "rotary_emb", None)
    attention = getattr(layers[-1], "self_attn", None) if layers else None
    if rotary is None or attention is None or not hasattr(attention, "q_proj") or not hasattr(attention, "k_proj"):
        raise DraftcountError(f"dream reads the target's attention, which needs a Llama-style language model "
                              f"(self_attn.q_proj/k_proj, a rotary embedding); {type(language).__name__} has none")
    return layers, rotary


def attention_probs(layer: nn.Module, rotary: nn.Module, layer_input: torch.Tensor) -> torch.Tensor:
    """(B, heads, T, T) causal attention probabilities of ``layer`` for its input (B, T, H)."""
    attention = layer.self_attn
    states = layer.input_layernorm(layer_input)
    batch, length, head_dim = states.shape[0], states.shape[1], attention.head_dim
    query = attention.q_proj(states).view(batch, length, -1, head_dim)
    key = attention.k_proj(states).view(batch, length, -1, head_dim)
    if hasattr(attention, "q_norm"):
        query, key = attention.q_norm(query), attention.k_norm(key)
    position_ids = torch.arange(length, device=states.device)[None].expand(batch, -1)
    cos, sin = rotary(states, position_ids)
    query, key = apply_rotary_pos_emb(query.transpose(1, 2), key.transpose(1, 2), cos, sin)
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    scores = (query @ key.transpose(-1, -2)).float() * attention.scaling
    future = torch.ones(length, length, dtype=torch.bool, device=states.device).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1)


def attention_flops(layer: nn.Module, length: int) -> float:
    """FLOPs of ``attention_probs`` for one sequence of ``length``: the q/k projections and the scores."""
    attention = layer.self_attn
    projections = attention.q_proj.weight.numel() + attention.k_proj.weight.numel()
    return 2.0 * length * projections + 2.0 * attention.q_proj.weight.shape[0] * length * length


def attention_received(layer: nn.Module, rotary: nn.Module, layer_input: torch.Tensor) -> torch.Tensor:
    """(T,) the attention each position of one sequence (T, H) receives, averaged over heads and queries (DREAM's
    ``compute_attention_scores``)."""
    return attention_probs(layer, rotary, layer_input[None]).mean(dim=(0, 1, 2))


def attention_entropy(layer: nn.Module, rotary: nn.Module, layer_input: torch.Tensor) -> torch.Tensor:
    """(B, T) each query's attention entropy in ``layer``, averaged over heads (DREAM's
    ``compute_attention_entropy``)."""
    probs = attention_probs(layer, rotary, layer_input)
    return -(probs * torch.log(probs + 1e-8)).sum(-1).mean(1)


def mid_candidates(num_layers: int, fraction: float = 0.4) -> list[int]:
    """The hidden states (1-based layer outputs) DREAM chooses the middle layer's target from: those feeding layers
    2..L-1 of the first L = ``fraction`` of the target (their ``mid_feature_collect``: layers 1..L-2 for a 32-layer
    target), at least layer 1's output on a small target."""
    return list(range(1, max(2, int(fraction * num_layers) - 1)))


def attention_candidates(model: nn.Module, candidates: list[int]) -> list[int]:
    """The candidates whose next layer is an attention layer (a hybrid's SSM layers have no attention entropy);
    the first candidate alone when none is, or when there is one (a single candidate needs no choosing)."""
    if len(candidates) == 1:
        return candidates
    layers = getattr(model.get_decoder(), "layers", None) or ()
    chosen = [index for index in candidates
              if index < len(layers) and hasattr(getattr(layers[index], "self_attn", None), "q_proj")]
    return chosen or candidates[:1]


@torch.no_grad()
def entropy_mid_states(model: nn.Module, states: dict[int, torch.Tensor]) -> torch.Tensor:
    """(B, T, H) per position the candidate hidden state (``states``: 1-based layer output -> (B, T, H), from
    ``attention_candidates``) whose next layer of ``model`` attends with the least entropy."""
    candidates = sorted(states)
    if len(candidates) == 1:
        return states[candidates[0]]
    layers, rotary = language_layers(model)
    entropies = torch.stack([attention_entropy(layers[index], rotary, states[index]) for index in candidates])
    choice = entropies.argmin(0)  # (B, T): which candidate
    stacked = torch.stack([states[index] for index in candidates])  # (C, B, T, H)
    return stacked.gather(0, choice[None, ..., None].expand(1, *stacked.shape[1:]))[0]
