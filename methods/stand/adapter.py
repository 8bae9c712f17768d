"""The `stand` adapter: drafts sampled from a store of the target's own next-token distributions.

Every step walks a static tree shape from the root: a node's children are drawn from the distribution the
store holds for its n-gram context (the sequence plus the drafted path), greedily (its top tokens, deterministic)
or by Gumbel-top-k (distinct children; child j carries the stored distribution with children 0..j-1 removed,
renormalised, as its q). A node whose context the store does not know gets no children, so the verified tree is
the part of the shape the store can fill. After verification the target's distributions at the verified nodes
(``fill=path``: the accepted path, whose last node gives the bonus token's; ``fill=tree``: every node) are merged
into the store. The store is kept across the generations of one prompt (``keep_store=prompt``: the paper's
several trajectories per question), per generation, or for the whole run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import torch

from harness.backend.device import index_on, to_device
from harness.backend.forward import LMOutput
from harness.engine.adapter import AdapterBase, StepContext
from methods.stand import StandOptions
from harness.retrieval.ngram_store import GumbelNoise, NgramDistributionStore, gumbel_top_k, top_k_rows
from harness.trees.graft import HostTree
from harness.trees.tree import TokenTree, children_of
from harness.verify.sampling import logits_to_probs
from harness.verify.verdict import Verdict


def reduced_distribution(tokens: Sequence[int], probs: Sequence[float], removed: set[int], vocab: int,
                         device: torch.device) -> torch.Tensor:
    """The stored distribution without the ``removed`` entries, renormalised, over the whole vocabulary: built on
    the host and copied to ``device`` without waiting for it (two synchronising uploads per node before)."""
    kept = [(token, prob) for index, (token, prob) in enumerate(zip(tokens, probs)) if index not in removed]
    total = sum(prob for _, prob in kept)
    dense = torch.zeros(vocab)  # host: built on the host, sent with to_device below
    if kept and total > 0:
        # host: written into the host-built dense
        dense[torch.tensor([token for token, _ in kept])] = torch.tensor([prob / total for _, prob in kept])
    return to_device(dense, device)


class StandAdapter(AdapterBase):
    """The `stand` adapter (see the module docstring)."""

    def __init__(self, options: StandOptions, shape: tuple[int, ...]) -> None:
        self.options = options
        self.shape = shape
        self.shape_children = children_of(shape)
        self.max_draft_nodes = len(shape) - 1
        self.store = NgramDistributionStore(options.max_n, options.store_top_k)
        self.store_owner: str | None = None
        self.noise = GumbelNoise()
        self.tokens: list[int] = []
        self.drafted = HostTree([], [], [])
        self.shape_nodes: list[int] = []  # per node of the drafted tree, the shape node it stands for
        self.accepted_per_shape_node = [0] * len(shape)  # how often each shape node was accepted (tree search)
        self.details = {"tree_parents": list(shape), "max_n": options.max_n, "store_top_k": options.store_top_k,
                        "fill": options.fill, "keep_store": options.keep_store}

    def _context(self, tree: HostTree, node: int) -> list[int]:
        """The last max_n tokens of the sequence followed by the drafted path down to ``node``."""
        return (self.tokens[-self.options.max_n :] + tree.path_tokens(node))[-self.options.max_n :]

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        owner = {"prompt": ctx.prompt_key, "generation": None, "run": "run"}[self.options.keep_store]
        if owner is None or owner != self.store_owner:
            self.store = NgramDistributionStore(self.options.max_n, self.options.store_top_k)
        self.store_owner = owner
        self.tokens = []
        ctx.counters.add_extra("store_entries_at_start", len(self.store))

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        self.tokens.extend(ctx.tokens[len(self.tokens):])
        tree, shape_nodes = HostTree([self.tokens[-1]], [-1], [None]), [0]
        greedy = ctx.sampling.is_greedy
        queue = deque([0])
        while queue:
            node = queue.popleft()
            kids = self.shape_children[shape_nodes[node]]
            found = self.store.lookup(self._context(tree, node)) if kids else None
            if found is None:
                continue
            count = min(len(kids), len(found.tokens))
            picks = (list(range(count)) if greedy else
                     gumbel_top_k(found.probs, count, self.noise.take(len(found.probs), ctx.generator)))
            for rank, pick in enumerate(picks):
                tree.tokens.append(found.tokens[pick])
                tree.parents.append(node)
                tree.probs.append(None if greedy else reduced_distribution(
                    found.tokens, found.probs, set(picks[:rank]), ctx.target_vocab_size, sequence.device))
                shape_nodes.append(kids[rank])
                queue.append(len(tree.tokens) - 1)
        self.drafted, self.shape_nodes = tree, shape_nodes
        return tree.token_tree(sequence.device)

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        # a composing method (hedgespec) may hand over this step's tree with nodes grafted after the drafted ones
        verified = self.drafted if tree.size == len(self.drafted.tokens) else HostTree.of(tree)
        for node in verdict.path[1:]:
            if node < len(self.shape_nodes):
                self.accepted_per_shape_node[self.shape_nodes[node]] += 1
        rows = list(verdict.path) if self.options.fill == "path" else list(range(tree.size))
        logits = target_out.logits[0, index_on(rows, target_out.logits.device)]
        distribution = logits_to_probs(logits, ctx.sampling) if not ctx.sampling.is_greedy else logits.softmax(-1)
        tokens, probs = top_k_rows(distribution, self.options.store_top_k)
        for node, row_tokens, row_probs in zip(rows, tokens, probs):
            self.store.add(self._context(verified, node), row_tokens, row_probs)
