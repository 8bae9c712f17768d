"""`polybasic`'s inner rounds as graphed blocks: per round, the small LM's whole chain as one block and the mid LM's
forward with the round's verdict as another, the running sequence in a device buffer.

A round's shapes are fixed by its catch-up lengths (the running tokens each stage has not seen: 1 or 2 inside a
step, a few at a step's start; one graph each) and ``gamma_inner``. The small block feeds its catch-up at the slots
after its cached length (``past``, filled per call) and drafts ``gamma_inner`` tokens (the argmax, or at T > 0
drawn from its warped distribution, from ``StepContext.graph_generator``) into a buffer of drafts, their q's into
another. The mid block reads its catch-up from the running buffer and the drafts from theirs, scores them in one
forward and makes the round's verdict on the device (greedy: its argmax chain; at T > 0 ``chain_draws``, the shared
verifier's closed form for a sampled chain), writing the accepted drafts and its bonus token after the running
sequence. No block writes what it reads, so the two eager runs before a capture leave the replay's inputs as they
were. The host then reads the accepted count: the one read per round that the staged verification needs by design
(the next round starts after the accepted prefix), and crops both stages to it. Outside the blocks a round costs
the two ``past`` fills and that read.

Two blocks rather than one keep each stage's seconds apart (the cost rule reads them). The FLOPs and the useful-work
ledger follow from the shapes, booked as ``Stage.feed`` books the eager forwards. A stage's catch-up over an empty
cache (a prompt's first round, as long as the prompt) is an eager forward whose logits start its block, so no prompt
length costs a capture. On the CPU (``capture=False``) the same bodies run eagerly, and ``harness.measure.
diagnostics.dispatch`` books them as inside graphs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from harness.backend.forward import count_forward, static_block_logits
from harness.backend.static_cache import static_layers
from harness.engine.adapter import StepContext
from harness.engine.drafting import choose_children
from harness.verify.sampling import align_vocab, logits_to_probs
from harness.verify.token_level import chain_draws
from methods.polybasic.stage import Stage

if TYPE_CHECKING:
    from methods.polybasic.adapter import PolybasicAdapter

RoundOutcome = tuple[int, torch.Tensor | None]  # accepted drafts, the mid LM's distributions (gamma + 1, V) or None


class RunningBuffer:
    """The step's running sequence on the drafters' device, at fixed addresses (graphs read and write it), and the
    small LM's drafts (gamma,) with their distributions (gamma, V); reallocated only when a stage's static cache is
    (its graphs go too). No block writes what it reads: a graph's first call runs its body twice before the capture
    (``GraphedForwards._capture``), and the replay must read what the first of them read."""

    def __init__(self) -> None:
        self.tokens: torch.Tensor | None = None
        self.drafts: torch.Tensor | None = None
        self.draft_q: torch.Tensor | None = None
        self.owners: tuple[object, object] | None = None

    def ready(self, small: Stage, mid: Stage, gamma: int, vocab: int) -> bool:
        """Allocated for the stages' current static caches; False when either cache is not static."""
        small_layers, mid_layers = static_layers(small.cache), static_layers(mid.cache)
        if small_layers is None or mid_layers is None:
            return False
        owners = (small.cache, mid.cache)
        if self.owners is None or any(new is not old for new, old in zip(owners, self.owners)):
            device = mid.lm.device
            self.tokens = torch.zeros(max(small_layers[0].capacity, mid_layers[0].capacity) + gamma + 2,
                                      dtype=torch.long, device=device)
            self.drafts = torch.zeros(gamma, dtype=torch.long, device=device)
            self.draft_q = torch.zeros((gamma, vocab), dtype=torch.float32, device=device)
            self.owners = owners
        return True


def graphs_rounds(adapter: PolybasicAdapter, ctx: StepContext, length: int) -> bool:
    """Whether this step's inner rounds run as graphed blocks: both stages have graph runners and static caches
    with room for every round of the block."""
    small, mid, gamma = adapter.small, adapter.mid, adapter.gamma
    if small.graphs is None or mid.graphs is None:
        return False
    if not adapter.running.ready(small, mid, gamma, ctx.target_vocab_size):
        return False
    longest = length + adapter.block + gamma  # the last round starts before length + block and writes gamma + 1
    return longest <= min(static_layers(small.cache)[0].capacity, static_layers(mid.cache)[0].capacity)


def graphed_rounds(adapter: PolybasicAdapter, ctx: StepContext, sequence: torch.Tensor,
                   block: int) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """The step's ``block`` mid-model tokens (a view of the running buffer) and the distributions they were drawn
    from (None: greedy), from graphed rounds (``graphs_rounds`` must hold)."""
    length = sequence.shape[-1]
    start = min(adapter.small.cached_len, adapter.mid.cached_len)
    running = adapter.running.tokens
    running[start:length].copy_(sequence[0, start:length])  # the tokens a stage has not seen yet
    probs: list[torch.Tensor | None] = []
    produced = 0
    while produced < block:
        accepted, mid_probs = run_round(adapter, ctx, length + produced)
        probs += [None] * (accepted + 1) if mid_probs is None else list(mid_probs[: accepted + 1].unbind())
        produced += accepted + 1
        adapter.count_round(accepted)
    return running[length:length + block], probs[:block]


def run_round(adapter: PolybasicAdapter, ctx: StepContext, length: int) -> RoundOutcome:
    """One inner round after a running sequence of ``length`` tokens: the small block, the mid block, the host's read
    of the accepted count, both stages cropped to the accepted prefix. A stage's catch-up over an empty cache (a
    prompt's first round: as long as the prompt) is fed eagerly first (``Stage.feed``), its block then starting
    from the logits it made."""
    small, mid, gamma = adapter.small, adapter.mid, adapter.gamma
    drawn = not ctx.sampling.is_greedy
    generator = ctx.graph_generator() if drawn else None
    step = replace(ctx, generator=generator) if drawn else ctx
    key = (gamma, ctx.target_vocab_size, (ctx.sampling.temperature, ctx.sampling.top_k, ctx.sampling.top_p)
           if drawn else (), id(adapter.running.tokens))
    keep = (adapter.running.tokens, adapter.running.drafts, adapter.running.draft_q)
    running = adapter.running.tokens
    with ctx.counters.phase("drafter"):
        small_past, small_new = small.cached_len, length - small.cached_len
        inputs = {}
        if not small.graphs.graphs_forward(small_past, small_new):
            inputs["logits"] = small.feed(ctx, running[small_past:length][None], rows=1)[-1]
            small_past, small_new = length, 0
        with small.timer.timing():
            small.graphs.run_block(("polybasic_small", small_new, *key), small.cache, small_past, length + gamma - 1,
                                   inputs, lambda buffers, past: small_chain(adapter, step, past, small_new,
                                                                             buffers.get("logits")),
                                   forwards=gamma - (small_new == 0), generator=generator, keep=keep)
        mid_past, mid_new = mid.cached_len, length - mid.cached_len + gamma
        inputs = {}
        if not mid.graphs.graphs_forward(mid_past, mid_new):
            fed = torch.cat([running[mid_past:length], adapter.running.drafts])
            inputs["logits"] = mid.feed(ctx, fed[None], rows=gamma + 1)
            mid_past, mid_new = length, gamma  # the block then starts after the running sequence
        eager = "logits" in inputs
        with mid.timer.timing():
            outputs = mid.graphs.run_block(("polybasic_mid", mid_new, eager, *key), mid.cache, mid_past,
                                           length + gamma, inputs,
                                           lambda buffers, past: mid_verdict(adapter, step, past, mid_new - gamma,
                                                                             buffers.get("logits")),
                                           forwards=int(not eager), generator=generator, keep=keep)
        accepted = int(outputs[0])  # the round's one host read
    if small_new:
        book_forward(small, ctx, small_past, small_new, 1)
    for index in range(gamma - 1):
        book_forward(small, ctx, length + index, 1, 1)
    if not eager:
        book_forward(mid, ctx, mid_past, mid_new, gamma + 1)
    small.cached_len, mid.cached_len = length + gamma - 1, length + gamma
    small.crop(length + accepted)
    mid.crop(length + accepted)
    return accepted, outputs[1] if drawn else None


def small_chain(adapter: PolybasicAdapter, ctx: StepContext, past: torch.Tensor, count: int,
                logits: torch.Tensor | None) -> tuple[()]:
    """The small block's body: its catch-up (``count`` running tokens at ``past``; none when ``logits`` came from an
    eager one), then ``gamma`` drafts (each but the last fed) into ``drafts``, their q's into ``draft_q``."""
    lm, cache, gamma, vocab = adapter.small.lm, adapter.small.cache, adapter.gamma, ctx.target_vocab_size
    running = adapter.running.tokens
    end = past + count  # the running sequence's length
    if logits is None:
        ids = running.index_select(0, past + torch.arange(count, device=running.device))
        logits = align_vocab(static_block_logits(lm, cache, ids, past, 1)[0, -1], vocab)
    tokens, qs = [], []
    for index in range(gamma):
        token, q = choose_children(logits, 1, ctx, True)[0]
        tokens.append(token.reshape(()))
        qs.append(q)
        if index < gamma - 1:
            logits = align_vocab(static_block_logits(lm, cache, token.reshape(1), end + index, 1)[0, -1], vocab)
    adapter.running.drafts.copy_(torch.stack(tokens))
    if qs[0] is not None:
        adapter.running.draft_q.copy_(torch.stack(qs))
    return ()


def mid_verdict(adapter: PolybasicAdapter, ctx: StepContext, past: torch.Tensor, count: int,
                logits: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """The mid block's body: its catch-up (``count`` running tokens at ``past``) and the drafts in one forward (none
    when ``logits`` came from an eager one), the round's verdict on the device, the accepted drafts and the mid's
    bonus token written after the running sequence. Returns the accepted count (0-d) and, at T > 0, the mid's
    distributions at the root and every draft."""
    lm, cache, gamma = adapter.mid.lm, adapter.mid.cache, adapter.gamma
    running, drafts = adapter.running.tokens, adapter.running.drafts
    end = past + count  # the running sequence's length
    ranks = torch.arange(gamma + 1, device=running.device)
    if logits is None:
        ids = torch.cat([running.index_select(0, past + torch.arange(count, device=running.device)), drafts])
        logits = align_vocab(static_block_logits(lm, cache, ids, past, gamma + 1)[0], ctx.target_vocab_size)
    chain = torch.cat([running.index_select(0, (end - 1).reshape(1)), drafts])  # the root (the last running token)
    slots = end + ranks
    if ctx.sampling.is_greedy:
        choices = logits.argmax(dim=-1)
        accepted = (drafts == choices[:-1]).long().cumprod(0).sum()
        running.index_copy_(0, slots, choices)  # the accepted drafts are the mid's choices; then its bonus
        return (accepted,)
    passed, bonus = chain_draws(chain, logits, adapter.running.draft_q, ctx.sampling, ctx.generator)
    accepted = passed[1:].cumprod(0).sum()
    ends = bonus.index_select(0, accepted.reshape(1)).expand(gamma + 1)
    running.index_copy_(0, slots, torch.where(ranks < accepted, torch.cat([drafts, drafts[:1]]), ends))
    return accepted, logits_to_probs(logits, ctx.sampling)


def book_forward(stage: Stage, ctx: StepContext, past: int, count: int, rows: int) -> None:
    """One of ``stage``'s forwards (``count`` positions after ``past``, logits for ``rows``) booked as
    ``Stage.feed`` books it: the drafter's tally, the useful-work ledger, the stage's counters."""
    stage.book(past, count, count_forward(stage.lm, ctx.counters.drafter, count, past, min(rows, count)))

