"""`polybasic`: Polybasic speculative decoding (Wang et al., ICML 2025, arXiv 2510.26527) with three models.

The chain is target <- mid <- small. Each step the adapter runs an inner speculative loop: the small draft LM
drafts ``gamma_inner`` tokens, the mid LM scores them in one forward and the harness's own verifier
(``verify_tree``: greedy match or speculative sampling) accepts a prefix plus the mid model's bonus token; this
repeats until ``block`` tokens are out. Those tokens are exact samples of the mid model (greedy: its argmax
chain), so the adapter sends them to the target as a chain whose draft distributions are the mid model's (None,
deterministic, when greedy): the engine's verification is then exact speculative decoding of target vs mid, and
the output is the target's. Both drafting models keep their KV caches across steps (``Stage``), cropped to the
accepted prefix after every inner verdict and after the target's. Under ``cuda_graphs=on`` each inner round runs as
two graphed blocks, its verdict made on the device (``methods.polybasic.graphed``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.backend.device import index_on
from harness.backend.forward import LMOutput
from harness.backend.models import LoadedModel, check_same_tokenizer, load_like_target
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.drafting import choose_children
from harness.engine.method_spec import BuildInputs
from harness.trees.tree import TokenTree
from harness.verify import verify_tree
from harness.verify.sampling import logits_to_probs
from harness.verify.verdict import Verdict
from methods.polybasic import PolybasicOptions
from methods.polybasic.graphed import RunningBuffer, graphed_rounds, graphs_rounds
from methods.polybasic.stage import Stage

@dataclass
class InnerRound:
    """One inner round's outcome: the new tokens (accepted small drafts + the mid model's bonus) and the mid
    model's distribution each was drawn from (None: greedy)."""

    tokens: list[int]
    probs: list[torch.Tensor | None]
    accepted: int


def chain_tree(root: torch.Tensor, tokens: torch.Tensor | list[torch.Tensor] | list[int],
               probs: list[torch.Tensor | None]) -> TokenTree:
    """A chain rooted at ``root``: node i + 1 holds tokens[i], drawn from probs[i]. Tokens are a device tensor (the
    graphed rounds' running buffer), device tensors (the small model's drafts) or host ints (the eager inner rounds'
    verdicts), uploaded in one copy that does not wait for the device (one synchronising copy per token before)."""
    if isinstance(tokens, torch.Tensor):
        drafted = tokens.to(root.device, root.dtype)
    elif tokens and not isinstance(tokens[0], torch.Tensor):
        drafted = index_on(tokens, root.device).to(root.dtype)
    else:
        drafted = torch.stack([t.reshape(()) for t in tokens]).to(root.device) if tokens else root.new_zeros(0)
    return TokenTree(torch.cat([root.reshape(1), drafted]), tuple(range(-1, len(probs))), [None, *probs])


class PolybasicAdapter(AdapterBase):
    """Three-model chain drafting (see the module docstring)."""

    def __init__(self, mid: LoadedModel, small: LoadedModel, options: PolybasicOptions) -> None:
        self.mid = Stage("mid", mid)
        self.small = Stage("small", small)
        self.block = options.block
        self.gamma = options.gamma_inner
        self.max_draft_nodes = options.block
        self.prefix_len = 0
        self.running = RunningBuffer()  # the graphed rounds' running sequence (cuda_graphs=on)
        self.rounds = self.inner_accepted = self.inner_drafted = 0
        self.details = {"tree_parents": list(range(-1, options.block)), "tree_depth": options.block,
                        "block": options.block, "gamma_inner": options.gamma_inner, "chain": "target <- mid <- small",
                        "mid_parameters": mid.num_parameters, "small_parameters": small.num_parameters,
                        "drafter_parameters": mid.num_parameters + small.num_parameters}

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        lookahead = self.block + self.gamma + 1  # a step's running sequence outgrows the accepted one by this much
        self.mid.begin(ctx, lookahead)
        self.small.begin(ctx, lookahead)

    def small_chain(self, ctx: StepContext, running: torch.Tensor) -> tuple[list[torch.Tensor], list]:
        """The small model's ``gamma`` drafts after ``running`` (1, n): argmax, or drawn from its warped
        distribution; its last draft is not fed (nothing needs its logits)."""
        logits = self.small.feed(ctx, running[:, self.small.cached_len:], rows=1)[-1]
        tokens, probs = [], []
        for index in range(self.gamma):
            token, q = choose_children(logits, 1, ctx, True)[0]
            tokens.append(token)
            probs.append(q)
            if index < self.gamma - 1:
                logits = self.small.feed(ctx, token.reshape(1, 1), rows=1)[-1]
        return tokens, probs

    def inner_round(self, ctx: StepContext, running: torch.Tensor) -> InnerRound:
        """Small drafts, mid scores them in one forward, the shared verifier accepts a prefix + the mid's bonus."""
        length = running.shape[-1]
        drafts, draft_probs = self.small_chain(ctx, running)
        unseen = running[:, self.mid.cached_len:].to(self.mid.lm.device)
        fed = torch.cat([unseen, torch.stack(drafts).to(unseen.device)[None]], dim=-1)
        mid_logits = self.mid.feed(ctx, fed, rows=self.gamma + 1)  # at the root and after every draft
        tree = chain_tree(running[0, -1], drafts, draft_probs)
        with ctx.counters.phase("verify"):
            verdict: Verdict = verify_tree(tree, mid_logits, ctx.sampling, ctx.generator)
        accepted = verdict.num_accepted
        self.mid.crop(length + accepted)
        self.small.crop(length + accepted)
        probs = ([None] * (accepted + 1) if ctx.sampling.is_greedy
                 else list(logits_to_probs(mid_logits[: accepted + 1], ctx.sampling)))
        return InnerRound(list(verdict.new_tokens), probs, accepted)

    def block_for(self, ctx: StepContext, length: int) -> int:
        """K, or fewer near the generation's end: no more drafts than tokens can still be emitted after the root
        (``ctx.max_sequence`` is prompt + new tokens + 1; 0 when unknown). A length fixed before drafting
        leaves the output distribution as it is."""
        if ctx.max_sequence <= 0:
            return self.block
        return max(1, min(self.block, ctx.max_sequence - length - 2))

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        self.prefix_len = sequence.shape[-1]
        block = self.block_for(ctx, self.prefix_len)
        if graphs_rounds(self, ctx, self.prefix_len):  # cuda_graphs=on: each round as two graphed blocks
            return chain_tree(sequence[0, -1], *graphed_rounds(self, ctx, sequence, block))
        running = sequence
        tokens: list[int] = []
        probs: list[torch.Tensor | None] = []
        while len(tokens) < block:
            outcome = self.inner_round(ctx, running)
            tokens += outcome.tokens
            probs += outcome.probs
            self.count_round(outcome.accepted)
            running = torch.cat([running, index_on(outcome.tokens, running.device)[None]], dim=-1)
        return chain_tree(sequence[0, -1], tokens[:block], probs[:block])

    def count_round(self, accepted: int) -> None:
        """An inner round in the step's counters: ``gamma`` drafted, ``accepted`` of them accepted by the mid LM."""
        self.rounds += 1
        self.inner_accepted += accepted
        self.inner_drafted += self.gamma

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        accepted_len = self.prefix_len + verdict.num_accepted  # the sequence and the accepted block tokens
        self.mid.settle(ctx.counters, accepted_len)
        self.small.settle(ctx.counters, accepted_len)
        ctx.counters.add_extra("polybasic_inner_rounds", self.rounds)
        ctx.counters.add_extra("polybasic_inner_accepted", self.inner_accepted)
        ctx.counters.add_extra("polybasic_inner_drafted", self.inner_drafted)
        ctx.counters.add_trace("polybasic_inner_rounds", self.rounds)
        self.rounds = self.inner_accepted = self.inner_drafted = 0


def load_mid(drafter_dir, target: LoadedModel) -> LoadedModel:
    """The trained mid LM of ``drafter_dir`` in the target's dtype, on its device."""
    return load_like_target(str(drafter_dir), target, "polybasic's mid LM")


def build(options: PolybasicOptions, inputs: BuildInputs) -> PolybasicAdapter:
    assert inputs.draft is not None and inputs.drafter_dir is not None  # build_adapter checked the catalog's needs
    mid = load_mid(inputs.drafter_dir, inputs.target)
    check_same_tokenizer(inputs.target, mid)
    check_same_tokenizer(inputs.target, inputs.draft)
    return PolybasicAdapter(mid, inputs.draft, options)
