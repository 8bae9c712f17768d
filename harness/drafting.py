"""Choosing draft children from a drafter's logits, the same way for every drafter and measurement."""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.adapter import StepContext
from harness.sampling import align_vocab, logits_to_probs, sample_from_probs

DraftChoice = list[tuple[torch.Tensor, torch.Tensor | None]]
ChildChooser = Callable[[torch.Tensor, int, StepContext, bool], DraftChoice]


def choose_children(logits: torch.Tensor, count: int, ctx: StepContext, replacement: bool) -> DraftChoice:
    """Up to ``count`` (token, distribution it was drawn from) pairs from a drafter's logits (V,).

    Greedy: the top-``count`` tokens, deterministic (None). Sampling: draws from
    the warped distribution q, independently (``replacement``) or each from q
    with the earlier draws removed (the verifier then gets that reduced q);
    fewer come back when q runs out of tokens.
    """
    logits = align_vocab(logits, ctx.target_vocab_size)
    if ctx.sampling.is_greedy:
        return [(token, None) for token in torch.topk(logits, count).indices]
    probs = logits_to_probs(logits, ctx.sampling)
    chosen: DraftChoice = []
    for _ in range(count):
        token = sample_from_probs(probs, ctx.generator)
        chosen.append((token, probs))
        if not replacement:
            probs = probs.clone()
            probs[token] = 0.0
            total = probs.sum()
            if total <= 0:
                break
            probs = probs / total
    return chosen
