"""The `hedgespec` adapter: a NormalHedge learner choosing, step by step, which of N drafters' trees is verified.

Every expert drafts every step; the learner's pick is verified, and once the target has spoken every expert is
scored on the accepted text with no further target forward (full information, "not a bandit"): its loss is the
share of the emitted tokens (accepted drafts, then the bonus) its own tree did not hold as a path below the root,
1 - matched / emitted. At T = 0 the matched count is exactly the tokens its tree would have had accepted (capped at
what was emitted); at T > 0 it is the same count, a proxy for the expected acceptance length. Experts not picked
commit this step as if their tree had been verified: the accepted text is grafted onto their tree and the target's
outputs along it are handed over, so every expert's state (KV caches, features, stores) follows the text. Their own
nodes keep their indices and the grafted ones come after them (as reader hands its head the tree it grafted), so an
expert's ``commit`` must take path nodes past the tree it proposed; the rows of its nodes off the path are filler
(the root's): the target never saw them.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import torch

from harness.backend.device import index_on
from harness.backend.forward import LMOutput
from harness.engine.adapter import AdapterBase, DraftAdapter, StepContext
from harness.engine.counters import GenerationCounters
from harness.trees.graft import HostTree
from harness.trees.tree import TokenTree
from harness.verify.verdict import Verdict
from methods.hedgespec.learner import NormalHedge


@dataclass
class Expert:
    name: str
    adapter: DraftAdapter


def shadow_context(ctx: StepContext) -> StepContext:
    """``ctx`` for an expert the learner did not pick: its drafter FLOPs are counted (they were spent), its own
    counters (useful FLOPs, method extras) are not the step's."""
    return dataclasses.replace(ctx, counters=GenerationCounters(drafter=ctx.counters.drafter))


def rows_along(target_out: LMOutput, rows: list[int]) -> LMOutput:
    """The target's outputs at the given rows of its forward (one per node of another tree)."""
    index = index_on(rows, target_out.logits.device)
    hidden = None if target_out.hidden_states is None else tuple(
        None if state is None else state[:, index] for state in target_out.hidden_states)
    return LMOutput(target_out.logits[:, index], hidden, 0.0)


class HedgeSpecAdapter(AdapterBase):
    """The `hedgespec` adapter (see the module docstring)."""

    def __init__(self, experts: list[Expert], reset: str, seed: int) -> None:
        self.experts = experts
        self.reset = reset
        self.random = random.Random(seed)
        self.learner = NormalHedge(len(experts))
        adapters = [expert.adapter for expert in experts]
        self.wants_target_hidden_states = any(adapter.wants_target_hidden_states for adapter in adapters)
        layers = [adapter.target_hidden_layers for adapter in adapters if adapter.wants_target_hidden_states]
        self.target_hidden_layers = None if any(layer is None for layer in layers) else tuple(
            sorted({index for layer in layers for index in layer})) or None
        self.max_draft_nodes = max(adapter.max_draft_nodes for adapter in adapters)
        self.trees: list[TokenTree] = []
        self.picked = 0
        self.details = {"experts": [expert.name for expert in experts], "learner": "normalhedge", "reset": reset,
                        **{f"expert:{expert.name}": dict(expert.adapter.details) for expert in experts}}

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        if self.reset == "generation":
            self.learner = NormalHedge(len(self.experts))
        for expert in self.experts:
            expert.adapter.begin(ctx, prompt_ids, prefill)

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        self.trees = [expert.adapter.propose(ctx, sequence) for expert in self.experts]
        self.picked = self.random.choices(range(len(self.experts)), weights=self.learner.weights)[0]
        return self.trees[self.picked]

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        emitted = [*verdict.accepted_tokens, verdict.bonus_token]
        losses = []
        hosts = HostTree.of_each(self.trees)  # every expert's tree on the host, in one read
        for index, (expert, own, host) in enumerate(zip(self.experts, self.trees, hosts)):
            losses.append(1.0 - host.matched_length(emitted) / len(emitted))
            if index == self.picked:
                expert.adapter.commit(ctx, tree, verdict, target_out)
                continue
            path = [0, *host.graft(list(verdict.accepted_tokens))]
            depth_of = {node: depth for depth, node in enumerate(path)}
            rows = [verdict.path[depth_of[node]] if node in depth_of else 0 for node in range(len(host.tokens))]
            shadow = Verdict(tuple(path), verdict.accepted_tokens, verdict.bonus_token, 0)
            expert.adapter.commit(shadow_context(ctx), host.token_tree(own.tokens.device), shadow,
                                  rows_along(target_out, rows))
        learner_loss = self.learner.update(losses)
        name = self.experts[self.picked].name
        ctx.counters.add_extra(f"picked:{name}", 1)
        ctx.counters.add_extra("hedge_learner_loss", learner_loss)
        ctx.counters.add_extra("hedge_picked_loss", losses[self.picked])
        for expert, loss in zip(self.experts, losses):
            ctx.counters.add_extra(f"hedge_loss:{expert.name}", loss)
        ctx.counters.add_trace("hedge_pick", self.picked)
