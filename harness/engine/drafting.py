"""Choosing draft children from a drafter's logits, the same way for every drafter and measurement."""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.engine.adapter import StepContext
from harness.engine.counters import DrafterWork
from harness.trees.tree import TokenTree
from harness.verify.sampling import align_vocab, logits_to_probs, sample_from_probs

DraftChoice = list[tuple[torch.Tensor, torch.Tensor | None]]
ChildChooser = Callable[[torch.Tensor, int, StepContext, bool], DraftChoice]


def choose_children(logits: torch.Tensor, count: int, ctx: StepContext, replacement: bool) -> DraftChoice:
    """``count`` (token, distribution it was drawn from) pairs from a drafter's logits (V,).

    Greedy: the top-``count`` tokens, deterministic (None). Sampling: draws from
    the warped distribution q, independently (``replacement``) or each from q
    with the earlier draws removed (the verifier then gets that reduced q).
    Nothing is read on the host: when q runs out of tokens (fewer than
    ``count`` are possible) the later siblings carry an all-zero q, which the
    verifier never accepts and whose rejection leaves the target's
    distribution as it was, as if they had not been drafted.
    """
    logits = align_vocab(logits, ctx.target_vocab_size)
    if ctx.sampling.is_greedy:
        return [(token, None) for token in torch.topk(logits, count).indices]
    probs = logits_to_probs(logits, ctx.sampling)
    chosen: DraftChoice = []
    alive = probs.new_ones(())  # 0 once q has run out of tokens
    for _ in range(count):
        token = sample_from_probs(probs, ctx.generator)
        chosen.append((token, probs * alive))
        if not replacement:
            left = probs.index_fill(0, token.reshape(1), 0.0)
            total = left.sum()
            alive = alive * (total > 0)
            fallback = torch.nn.functional.one_hot(token, probs.shape[-1]).to(probs.dtype)  # any valid draw source
            probs = torch.where(total > 0, left / total.clamp_min(torch.finfo(left.dtype).tiny), fallback)
    return chosen


def parallel_chain(root: torch.Tensor, logits: torch.Tensor, ctx: StepContext, work: DrafterWork,
                   mask_flops: float) -> TokenTree:
    """The chain a parallel drafter (PARD, P-EAGLE) drafts from ONE forward: ``logits`` (k, V), row 0 from the last
    accepted token and row j from mask slot j. Draft j + 1 is drawn from row j's warped distribution, which it
    carries to the verifier; mask j's ``mask_flops`` are charged to draft j + 1 (useful iff it is accepted)."""
    tokens, probs = [root], [None]
    for position in range(logits.shape[0]):
        token, q = choose_children(logits[position], 1, ctx, True)[0]
        tokens.append(token.to(root.device))
        probs.append(q)
        if position:
            work.charge([position + 1], mask_flops)
    return TokenTree(torch.stack(tokens), tuple(range(-1, logits.shape[0])), probs)
