"""Choosing draft children from a drafter's logits, the same way for every drafter and measurement."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from harness.engine.adapter import StepContext
from harness.engine.counters import DrafterWork
from harness.trees.beam import BeamDraws
from harness.trees.beam_shape import BeamShape
from harness.trees.tree import TokenTree
from harness.verify.sampling import align_vocab, logits_to_probs, sample_from_probs

DraftChoice = list[tuple[torch.Tensor, torch.Tensor | None]]
ChildChooser = Callable[[torch.Tensor, int, StepContext, bool], DraftChoice]


def beam_draws(ctx: StepContext, shape: BeamShape) -> BeamDraws | None:
    """How a beam drafter drafts this step (``harness.trees.beam``): None for top-k children verified as q = 1
    (the ``topk`` convention, and every convention at T = 0), or the draws of the ``sampled`` one at T > 0."""
    if shape.drafts != "sampled" or ctx.sampling.is_greedy:
        return None
    return BeamDraws(partial(logits_to_probs, sampling=ctx.sampling), ctx.generator, ctx.target_vocab_size)


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
    if ctx.sampling.is_greedy:
        return top_children(logits, count, ctx, replacement)
    probs = logits_to_probs(align_vocab(logits, ctx.target_vocab_size), ctx.sampling)
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


def top_children(logits: torch.Tensor, count: int, ctx: StepContext, replacement: bool) -> DraftChoice:
    """The top-``count`` tokens of a drafter's logits (V,), deterministic (verified as q = 1) at every temperature:
    the ``topk`` drafting convention (``choose_children`` at T = 0)."""
    return [(token, None) for token in torch.topk(align_vocab(logits, ctx.target_vocab_size), count).indices]


CHOOSERS: dict[str, ChildChooser] = {"sampled": choose_children, "topk": top_children}  # by drafting convention


def parallel_chain(root: torch.Tensor, logits: torch.Tensor, ctx: StepContext, work: DrafterWork,
                   mask_flops: float, drafts: str = "sampled") -> TokenTree:
    """The chain a parallel drafter (PARD, P-EAGLE) drafts from ONE forward: ``logits`` (k, V), row 0 from the last
    accepted token and row j from mask slot j. Draft j + 1 is drawn from row j's warped distribution, which it
    carries to the verifier (``drafts`` topk: row j's argmax, q = 1); mask j's ``mask_flops`` are charged to draft
    j + 1 (useful iff it is accepted)."""
    tokens, probs = [root], [None]
    for position in range(logits.shape[0]):
        token, q = CHOOSERS[drafts](logits[position], 1, ctx, True)[0]
        tokens.append(token.to(root.device))
        probs.append(q)
        if position:
            work.charge([position + 1], mask_flops)
    return TokenTree(torch.stack(tokens), tuple(range(-1, logits.shape[0])), probs)
