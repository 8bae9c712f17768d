"""One counted forward pass: every model call of every method goes through here.

Each call adds its forward count, processed tokens and FLOP estimate to a
ForwardTally, so target and drafter work are measured the same way for all
methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from harness.models import LoadedModel


@dataclass
class ForwardTally:
    forwards: int = 0
    tokens: int = 0
    flops: float = 0.0

    def add(self, new_tokens: int, flops: float) -> None:
        self.forwards += 1
        self.tokens += new_tokens
        self.flops += flops


@dataclass
class LMOutput:
    logits: torch.Tensor  # (B, q, V) or (B, logits_to_keep, V)
    hidden_states: tuple[torch.Tensor, ...] | None  # embeddings + every layer, when asked for
    flops: float = 0.0  # this forward's FLOP estimate (already added to the tally)


def run_model(
    lm: LoadedModel,
    input_ids: torch.Tensor,
    cache: DynamicCache,
    position_ids: torch.Tensor,
    tally: ForwardTally,
    attention_bias: torch.Tensor | None = None,
    logits_to_keep: int = 0,
    output_hidden_states: bool = False,
) -> LMOutput:
    """Run ``lm`` on ``input_ids`` (B, q) at ``position_ids`` (B, q), extending ``cache``.

    ``attention_bias`` is the additive float mask (B, 1, q, past + q) of a
    token tree, or None for causal attention. ``logits_to_keep`` > 0 computes
    logits only for the last that many positions.
    """
    past = cache.get_seq_length()
    new_tokens = input_ids.shape[-1]
    output = lm.model(
        input_ids=input_ids,
        past_key_values=cache,
        position_ids=position_ids,
        attention_mask=attention_bias,
        use_cache=True,
        logits_to_keep=logits_to_keep,
        output_hidden_states=output_hidden_states,
    )
    logits_tokens = min(logits_to_keep, new_tokens) if logits_to_keep > 0 else new_tokens
    flops = count_forward(lm, tally, new_tokens, past, logits_tokens)
    return LMOutput(logits=output.logits, hidden_states=output.hidden_states if output_hidden_states else None,
                    flops=flops)


def count_forward(lm: LoadedModel, tally: ForwardTally, new_tokens: int, past: int, logits_tokens: int) -> float:
    """Add one forward of ``new_tokens`` queries after ``past`` cached positions to ``tally``; return its FLOPs."""
    flops = lm.cost.forward_flops(new_tokens, past + new_tokens, logits_tokens)
    tally.add(new_tokens, flops)
    return flops


def positions(start: int, count: int, device: torch.device) -> torch.Tensor:
    """(1, count) position ids start, start+1, ..."""
    return torch.arange(start, start + count, device=device).unsqueeze(0)
