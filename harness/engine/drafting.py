"""Choosing draft children from a drafter's logits, the same way for every drafter and measurement."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial

import torch

from harness.engine.adapter import StepContext
from harness.engine.counters import DrafterWork
from harness.backend.cuda_graphs import GraphedForwards
from harness.trees.beam import BeamDraws, BeamTree, beam_from_tensors
from harness.trees.beam_shape import BeamShape
from harness.trees.tree import TokenTree
from harness.verify.sampling import align_vocab, logits_to_probs, sample_from_probs

DraftChoice = list[tuple[torch.Tensor, torch.Tensor | None]]
ChildChooser = Callable[[torch.Tensor, int, StepContext, bool], DraftChoice]


def beam_block(graphs: GraphedForwards, ctx: StepContext, key: Hashable, inputs: dict[str, torch.Tensor],
               body: Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, ...]], depth: int, width: int) -> BeamTree:
    """A beam drafter's whole draft over no KV cache (Medusa's heads, OWL's LSTM) as one graphed block:
    ``body(buffers)`` grows the beam on the device and returns its ``beam_tensors``; the beam, back on the host."""
    with ctx.counters.phase("drafter"):
        outputs = graphs.run_block(key, None, 0, 0, inputs, lambda buffers, _: body(buffers), forwards=depth)
    return beam_from_tensors(outputs, width, depth)


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
    accepted token and row j from mask slot j (``chain_choices``); mask j's ``mask_flops`` are charged to draft
    j + 1 (useful iff it is accepted)."""
    tokens, probs = chain_choices(root, logits, ctx, drafts)
    charge_masks(work, logits.shape[0], mask_flops)
    return TokenTree(torch.stack(tokens), tuple(range(-1, logits.shape[0])), probs)


def chain_choices(root: torch.Tensor, logits: torch.Tensor, ctx: StepContext,
                  drafts: str = "sampled") -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """A parallel drafter's chain, root first, device work only (a graphed block runs it): draft j + 1 is drawn
    from row j's warped distribution, which it carries to the verifier (``drafts`` topk: row j's argmax, q = 1)."""
    tokens, probs = [root], [None]
    for position in range(logits.shape[0]):
        token, q = CHOOSERS[drafts](logits[position], 1, ctx, True)[0]
        tokens.append(token.to(root.device))
        probs.append(q)
    return tokens, probs


def charge_masks(work: DrafterWork, drafts: int, mask_flops: float) -> None:
    """A parallel chain of ``drafts``: each mask slot's FLOPs charged to the draft it makes (drafts 2..k)."""
    for position in range(1, drafts):
        work.charge([position + 1], mask_flops)
