"""Drafting with a small LM over a static tree shape: the shared engine of `sd` and `tree_sd`.

Every step the draft LM expands the shape level by level: one forward feeds all
nodes of a level that have children, with a tree attention mask over its own
KV cache (prefix + the tree nodes fed so far), so branches are never re-run.
Children are the draft's top-c tokens (greedy) or c tokens sampled from its
warped distribution, with replacement (SpecInfer) or without (Sequoia: each
later sibling is drawn from q with the earlier siblings removed, and carries
that reduced q to the verifier). After verification the draft cache keeps the
accepted nodes it has fed. A chain shape gives standard speculative decoding.
"""

from __future__ import annotations

import torch

from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.counters import DRAFTING_POSITION, DrafterWork, book_drafting_forward
from harness.engine.draft_lm_graph import graphed_levels, graphed_tokens, graphs_draft, graphs_levels
from harness.engine.draft_lm_plan import Chooser, Level, expansion_plan, grow
from harness.engine.drafting import ChildChooser, choose_children
from harness.backend.forward import LMOutput, positions, run_model
from harness.backend.kv_cache import keep_tree_path, new_cache
from harness.backend.models import LoadedModel
from harness.trees.tree import TokenTree, children_of, depths_of, root_only, tree_attention_bias
from harness.verify.verdict import Verdict


class DraftLMAdapter(AdapterBase):
    """A draft LM expanding a fixed tree shape each step (see the module docstring)."""

    wants_target_hidden_states = False

    def __init__(self, draft: LoadedModel, shape: tuple[int, ...], replacement: bool,
                 chooser: ChildChooser = choose_children) -> None:
        self.draft = draft
        self.shape = shape
        self.shape_children = children_of(shape)
        self.depth = max(depths_of(shape))
        self.plan = expansion_plan(tuple(shape))
        self.replacement = replacement
        self.chooser = chooser
        self.max_draft_nodes = len(shape) - 1
        self.details = {"tree_parents": list(shape), "tree_depth": self.depth, "replacement": replacement}
        self.cache = new_cache(draft.config)
        self.graphs = None
        self.cached_len = 0
        self.fed_offset: dict[int, int] = {}
        self.root_cached_len = 0
        self.work = DrafterWork()

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self.cache = ctx.drafter_cache(self, self.draft.config, len(self.shape), self.draft.dtype, self.draft.device)
        self.graphs = ctx.drafter_graphs(self, self.draft.config, self.draft.device, self.draft.dtype)
        self.cached_len = 0

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        if not self.shape_children[0]:  # an empty shape (a tree search may choose one): nothing to draft
            self.fed_offset, self.root_cached_len = {}, self.cached_len
            return root_only(sequence[0, -1])
        device = self.draft.device
        unseen = sequence[:, self.cached_len :].to(device)
        prefix_len = sequence.shape[-1]  # the draft cache then holds the sequence, root included
        if graphs_draft(self, unseen.shape[-1]):  # the catch-up and every level as one graphed block
            tokens, probs = graphed_tokens(self, ctx, unseen[0])
        else:
            root, root_logits = sequence[0, -1].to(device), self._catch_up(ctx, unseen)
            if graphs_levels(self, prefix_len):  # a prompt's first catch-up ran on its own; the levels as one block
                tokens, probs = graphed_levels(self, ctx, root, root_logits, prefix_len)
            else:
                tokens, probs = self._eager_levels(ctx, root, root_logits, prefix_len)
        self.fed_offset = {node: offset for offset, node in enumerate(self.plan.fed)}
        self.root_cached_len = prefix_len
        return TokenTree(tokens, self.plan.parents, probs)

    def choose(self, ctx: StepContext) -> Chooser:
        """The children chooser of this step (``grow``'s): the run's convention, drawing from ``ctx``'s generator."""
        return lambda logits, count: self.chooser(logits, count, ctx, self.replacement)

    def _catch_up(self, ctx: StepContext, unseen: torch.Tensor) -> torch.Tensor:
        """The draft LM over the tokens it has not seen (replayed from a graph of its shape under
        ``cuda_graphs=on``, or eager: a prompt's first); the root's logits."""
        out = run_model(self.draft, unseen, self.cache, positions(self.cached_len, unseen.shape[-1], self.draft.device),
                        ctx.counters.drafter, logits_to_keep=1, graphs=self.graphs)
        book_drafting_forward(ctx.counters, self.work, out.flops, unseen.shape[-1])  # the last one drafts depth 1
        return out.logits[0, -1]

    def _eager_levels(self, ctx: StepContext, root: torch.Tensor, root_logits: torch.Tensor,
                      prefix_len: int) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """The draft's tokens and q's, each level's forward on its own."""
        device = self.draft.device

        def feed(level: Level, fed_tokens: torch.Tensor) -> torch.Tensor:
            bias = tree_attention_bias(self.plan.parents, list(level.cached), list(level.fed), self.draft.dtype,
                                       device)
            level_out = run_model(self.draft, fed_tokens.to(device)[None], self.cache,
                                  torch.full((1, len(level.fed)), prefix_len - 1 + level.depth, device=device),
                                  ctx.counters.drafter, attention_bias=bias, graphs=self.graphs)
            self.work.charge(list(level.fed), level_out.flops)
            return level_out.logits[0]

        tokens, probs = grow(self.plan, root, root_logits, self.choose(ctx), feed)
        return torch.stack(tokens), probs

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        kept = [self.fed_offset[node] for node in verdict.path[1:] if node in self.fed_offset]
        self.work.settle(ctx.counters, useful_nodes(verdict))
        keep_tree_path(self.cache, self.root_cached_len, kept, self.graphs)
        self.cached_len = self.root_cached_len + len(kept)


def useful_nodes(verdict: Verdict) -> list:
    """The work a draft LM's step made useful: the fed nodes accepted (their KV is kept), and the catch-up forward's
    drafting position (``book_drafting_forward``) once a depth-1 node is accepted."""
    return [*verdict.path[1:], DRAFTING_POSITION] if verdict.num_accepted else list(verdict.path[1:])
