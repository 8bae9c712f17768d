"""`medusa`: Medusa or Hydra heads drafting EAGLE-2-style trees, verified by the shared verifier.

Each round starts from the target's last hidden state h_p at the newest accepted position (the one whose LM head
chose the root). Head 1 gives the root's children; head d + 1 the children of depth-d nodes: beam-style by default
(``harness.trees.beam``: the depth-d frontier is expanded), or at the fixed places of a static choice set
(``choices``; ``harness.trees.choices``: each node with children reads the ranks its choices name). A Medusa head
reads h_p alone, so every node of a depth gets the same distribution (one row per head and round); a Hydra head
reads h_p and the target's embeddings of the node's path (the root and its drafted ancestors), one row per expanded
node. No KV cache, no attention.

Drafts are deterministic top-k tokens (q = 1). Drafter FLOPs: a Medusa head's row is useful when a node of its depth
was accepted; a Hydra head's row when one of its node's children was (head 1's: when a depth-1 node was).
"""

from __future__ import annotations

import torch

from harness.backend.forward import LMOutput
from harness.backend.models import LoadedModel
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.counters import DrafterWork
from harness.engine.drafting import beam_draws
from harness.engine.method_spec import BuildInputs
from harness.errors import DraftcountError
from harness.trees.beam import BeamTree, Frontier, grow_beam_tree
from harness.trees.choices import ChoiceTree, calibrated_choices, read_choices
from harness.trees.tree import TokenTree
from harness.verify.verdict import Verdict
from methods.medusa import MedusaOptions
from methods.medusa.checkpoint import load_heads
from methods.medusa.graphed import FIRST_HEAD, graphed_propose, graphs_draft
from methods.medusa.model import MedusaHeads


class MedusaAdapter(AdapterBase):
    """The `medusa` adapter (see the module docstring)."""

    wants_target_hidden_states = True
    target_hidden_layers = (-1,)

    def __init__(self, heads: MedusaHeads, target: LoadedModel, options: MedusaOptions) -> None:
        self.shape = options.shape()
        self.static = static_tree(options, heads)
        depth = self.static.depth if self.static else self.shape.depth
        if depth > heads.arch.heads:
            raise DraftcountError(f"method 'medusa': depth {depth} needs as many heads; the drafter has "
                                  f"{heads.arch.heads}")
        self.heads = heads.to(target.device, target.dtype).eval()
        self.lm_head = target.model.get_output_embeddings()
        self.target_config = target.model.config  # the graph runner's capture check (the heads have no RoPE)
        self.embed = target.model.get_input_embeddings()
        self.costs = [heads.cost(head, self.lm_head.weight.numel()) for head in range(1, heads.arch.heads + 1)]
        self.max_draft_nodes = self.static.nodes if self.static else self.shape.max_nodes
        self.details = {"top_k": self.shape.top_k, "depth": depth, "budget": self.max_draft_nodes,
                        "choices": options.choices or "beam", "heads": heads.arch.heads, "hydra": heads.arch.hydra,
                        "own_lm_heads": heads.arch.own_lm_heads, "drafter_parameters": heads.trainable_parameters(),
                        **heads.draft_vocab.describe()}
        if self.static:
            self.details["tree_choices"] = [list(choice) for choice in self.static.choices]
        self.static_index = level_index(self.static, heads.arch.hydra, target.device) if self.static else []
        self._reset()

    def _reset(self) -> None:
        # (H,) the target's last hidden state at the newest accepted position
        self.last_hidden = torch.empty(0, device=self.lm_head.weight.device)
        self.beam: BeamTree | None = None
        self.static_slots: list[tuple[int, int] | None] = []  # a static tree's parent slots, as BeamTree's
        self.work = DrafterWork()
        self.graphs = None  # cuda_graphs=on: the draft as one graphed block (``methods.medusa.graphed``)

    def _head(self, ctx: StepContext, head: int, path: torch.Tensor | None, rows: int) -> tuple[torch.Tensor, float]:
        """Head ``head``'s log-probabilities over ``rows`` rows (Hydra: their path tokens (rows, head))."""
        with ctx.counters.phase("drafter"), torch.no_grad():
            logprobs = self.head_logprobs(head, self.last_hidden, path, rows)
        return logprobs, self.count_head(ctx, head, rows)

    def head_logprobs(self, head: int, last_hidden: torch.Tensor, path: torch.Tensor | None, rows: int) -> torch.Tensor:
        """Head ``head``'s log-probabilities (rows, V) from the target's hidden state (H,) (Hydra: and the paths)."""
        hidden = self.heads.hidden(head, last_hidden.expand(rows, -1), self.embed(path) if path is not None else None)
        return torch.log_softmax(self.heads.logits(head, hidden, self.lm_head).float(), dim=-1)

    def count_head(self, ctx: StepContext, head: int, rows: int) -> float:
        """Count head ``head``'s forward over ``rows`` rows in the drafter's tally; its FLOPs."""
        flops = self.costs[head - 1].forward_flops(rows, rows, rows)
        ctx.counters.drafter.add(rows, flops)
        return flops

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self._reset()
        weight = self.lm_head.weight
        self.graphs = ctx.drafter_graphs(self, self.target_config, weight.device, weight.dtype)
        self.last_hidden = prefill.hidden_states[-1][0, -1]

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        if self.static:
            return self._propose_static(ctx, sequence[0, -1])
        if graphs_draft(self, ctx):  # the whole draft as one graph (``methods.medusa.graphed``)
            return graphed_propose(self, ctx, sequence)
        root = sequence[0, -1]
        hydra = self.heads.arch.hydra
        paths = [root.reshape(1, 1)]  # Hydra: per expanded depth, the frontier's paths (root first)
        root_logprobs, flops = self._head(ctx, 1, paths[0] if hydra else None, 1)
        self.work.charge([FIRST_HEAD], flops)

        def expand(frontier: Frontier) -> torch.Tensor:
            rows, head = frontier.tokens.shape[0], frontier.depth + 1
            if not hydra:  # one row: every node of the depth gets the head's one distribution
                logprobs, cost = self._head(ctx, head, None, 1)
                self.work.charge([("head", head)], cost)
                return logprobs.expand(rows, -1)
            paths.append(torch.cat([paths[-1].index_select(0, frontier.parent_rows), frontier.tokens[:, None]], 1))
            logprobs, cost = self._head(ctx, head, paths[-1], rows)
            self.work.charge([(frontier.depth, row) for row in range(rows)], cost)
            return logprobs

        self.beam = grow_beam_tree(root, root_logprobs[0], expand, self.shape, self.heads.draft_vocab.token_map,
                                   beam_draws(ctx, self.shape))
        return self.beam.tree

    def _propose_static(self, ctx: StepContext, root: torch.Tensor) -> TokenTree:
        """The static tree's tokens, depth by depth: head d reads the depth d - 1 nodes that have children (one
        row for Medusa heads, one per such node for Hydra's) and each child takes the rank its choice names."""
        hydra = self.heads.arch.hydra
        tokens, slots = [root.reshape(1)], [None]
        paths = root.reshape(1, 1)  # Hydra: the previous depth's node paths
        for depth, (level, (parents, child_rows, ranks)) in enumerate(zip(self.static.levels, self.static_index),
                                                                      start=1):
            rows = len(level.parent_nodes) if hydra else 1
            logprobs, flops = self._head(ctx, depth, paths.index_select(0, parents) if hydra else None, rows)
            units = [FIRST_HEAD] if depth == 1 else [(depth - 1, row) for row in range(rows)] if hydra else \
                [("head", depth)]
            self.work.charge(units, flops)
            children = self.heads.draft_vocab.to_target(logprobs.topk(level.top, dim=-1).indices[child_rows, ranks])
            if hydra:
                paths = torch.cat([paths.index_select(0, parents.index_select(0, child_rows)), children[:, None]], 1)
            tokens.append(children)
            slots += [None if depth == 1 else (depth - 1, row) for row in level.child_rows]
        self.beam, self.static_slots = None, slots
        return TokenTree(torch.cat(tokens), self.static.parents)

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        slots = self.beam.parent_slots if self.beam else self.static_slots  # nodes past them were grafted on by a
        # composing method (hedgespec)
        accepted = [node for node in verdict.path[1:] if node < len(slots)]
        if self.heads.arch.hydra:
            useful = [slots[node] or FIRST_HEAD for node in accepted]
        else:
            useful = [("head", tree.depths[node]) for node in accepted]
        self.work.settle(ctx.counters, useful)
        self.last_hidden = target_out.hidden_states[-1][0, verdict.path[-1]]


def level_index(tree: ChoiceTree, hydra: bool, device: torch.device) -> list[tuple[torch.Tensor, ...]]:
    """Per depth of a static tree, on ``device`` once (not every step): its parents' rows among the previous
    depth's nodes, each child's row among those parents (all 0 for Medusa heads: one row per depth) and rank."""
    index, first, width = [], 0, 1  # the previous depth's first node id and its node count
    for level in tree.levels:
        ranks = torch.tensor(level.ranks, device=device)
        parents = torch.tensor(level.parent_nodes, device=device) - first
        child_rows = torch.tensor(level.child_rows, device=device) if hydra else torch.zeros_like(ranks)
        index.append((parents, child_rows, ranks))
        first, width = first + width, len(level.ranks)
    return index


def static_tree(options: MedusaOptions, heads: MedusaHeads) -> ChoiceTree | None:
    """The static tree ``options.choices`` names (None: beam-grown trees)."""
    if not options.choices:
        return None
    if options.choices != "calibrated":
        tree = read_choices(options.choices)
        deepest = max(rank for choice in tree.choices for rank in choice)
        if deepest >= heads.draft_vocab.size:
            raise DraftcountError(f"{options.choices}: rank {deepest} is beyond the heads' vocabulary "
                                  f"({heads.draft_vocab.size} tokens)")
        return tree
    if heads.rank_accuracy is None:
        raise DraftcountError("method 'medusa': choices 'calibrated' needs heads trained here with --heldout (they "
                              "carry per-rank accuracies); give a tree-choices file or leave choices empty")
    shape = options.shape()
    return calibrated_choices(heads.rank_accuracy, shape.budget, shape.depth)


def build(options: MedusaOptions, inputs: BuildInputs) -> MedusaAdapter:
    return MedusaAdapter(load_heads(inputs.drafter_dir, inputs.target.model), inputs.target, options)
