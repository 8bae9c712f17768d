"""A draft LM over a fixed tree shape (`sd`'s chain, `tree_sd`'s tree) drafting every row of a static batch at
once: one draft forward per level of the shape, over a draft cache masked like the target's (``SlotMask``)."""

from __future__ import annotations

import torch

from harness.backend.forward import ForwardTally, LMOutput, run_model
from harness.backend.kv_cache import new_cache
from harness.engine.adapter import BatchRow
from harness.engine.batch_slots import PAD_TOKEN, SlotMask, causal, charge_rows
from harness.engine.counters import DrafterWork, book_drafting_forward, count_useful_drafter_flops
from harness.engine.draft_lm import DraftLMAdapter, useful_nodes
from harness.trees.tree import TokenTree, ancestor_matrix, root_only
from harness.verify.verdict import Verdict


class DraftLMRows:
    """The rows' draft LM: its cache and slot mask, which draft slots the current step fed, and each row's drafter
    work (booked as ``DraftLMAdapter`` books it: the prompt's and each step's first forward useful whatever is
    accepted, a fed node's share useful iff it was accepted)."""

    wants_hidden = False
    hidden_layers: tuple[int, ...] | None = None

    def __init__(self, adapter: DraftLMAdapter) -> None:
        self.adapter, self.lm = adapter, adapter.draft
        self.cache = new_cache(self.lm.config)
        self.mask = SlotMask(torch.zeros(0, 0, dtype=torch.bool, device=self.lm.device))
        self.fed: list[int] = []  # the tree nodes the step fed after the root
        self.step_start = 0  # the draft cache's first slot of the step (the pending token, then the root)
        self.works: list[DrafterWork] = []  # one per live row

    def prefill(self, rows: list[BatchRow], ids: torch.Tensor, valid: torch.Tensor, position_ids: torch.Tensor,
                out: LMOutput) -> None:
        """Every prompt through the draft LM."""
        device = self.lm.device
        self.mask = SlotMask(valid[:, :0].to(device))
        self.mask.extend(valid)
        run_model(self.lm, ids.to(device), self.cache, position_ids.to(device), ForwardTally(),
                  attention_bias=self.mask.bias(causal(ids.shape[-1], device), 0, self.lm.dtype), logits_to_keep=1)
        lengths = [row.prompt.shape[-1] for row in rows]
        flops = charge_rows(self.lm, rows, lambda counters: counters.drafter, lengths, lengths)
        self.works = [DrafterWork() for _ in rows]
        for row, amount in zip(rows, flops):  # the prompt's KV: kept whatever is accepted
            count_useful_drafter_flops(row.ctx.counters, amount)

    def draft(self, rows: list[BatchRow]) -> list[TokenTree]:
        """Every row's tree over the shape, grown level by level as ``DraftLMAdapter.propose`` grows it (the same
        nodes in the same order): the first forward feeds each row's pending token (or a masked pad) and root,
        each later one the level's nodes that have children, every row at once."""
        drafter, lm, device = self.adapter, self.lm, self.lm.device
        if not drafter.shape_children[0]:
            return [root_only(torch.tensor(row.root)) for row in rows]  # host: a batch's trees are built on the host
        has_pending = torch.tensor([row.pending is not None for row in rows], device=device)
        inputs = torch.tensor([[PAD_TOKEN if row.pending is None else row.pending, row.root] for row in rows],
                              device=device)
        base = torch.tensor([row.position for row in rows], device=device)
        self.step_start = self.mask.extend(torch.stack([has_pending, torch.ones_like(has_pending)], dim=-1))
        visible = torch.tensor([[True, False], [True, True]], device=device)
        positions = torch.stack([(base - 1).clamp(min=0), base], dim=-1)
        # host: the tree's tokens gather on the host (each choice is read with .cpu())
        tokens, parents, probs = [torch.tensor([row.root for row in rows])], [-1], [[None] * len(rows)]
        node_logits: dict[int, torch.Tensor] = {}
        frontier, self.fed, query_nodes = [(0, 0)], [], [0]
        feeding: list[int] = []  # the tree nodes this forward feeds (none: the pending token and the root)
        for depth in range(1, drafter.depth + 1):
            keys = self.mask.valid.shape[-1]
            out = run_model(lm, inputs, self.cache, positions, ForwardTally(),
                            attention_bias=self.mask.bias(visible, self.step_start, lm.dtype))
            flops = charge_rows(lm, rows, lambda counters: counters.drafter, [inputs.shape[-1]] * len(rows),
                                [keys] * len(rows))
            for row, work, amount in zip(rows, self.works, flops):
                if feeding:
                    work.charge(feeding, amount)
                else:  # the pending token's KV: kept whatever is accepted; the root drafts depth 1
                    book_drafting_forward(row.ctx.counters, work, amount, inputs.shape[-1])
            width = out.logits.shape[1]
            node_logits.update({node: out.logits[:, width - len(query_nodes) + index]
                                for index, node in enumerate(query_nodes)})
            level = []
            for shape_node, tree_node in frontier:
                kids = drafter.shape_children[shape_node]
                if not kids:
                    continue
                chosen = [drafter.chooser(node_logits[tree_node][index], len(kids), row.ctx, drafter.replacement)
                          for index, row in enumerate(rows)]
                for rank, kid in enumerate(kids):
                    tokens.append(torch.stack([choice[rank][0].cpu() for choice in chosen]))
                    parents.append(tree_node)
                    probs.append([choice[rank][1] for choice in chosen])
                    level.append((kid, len(tokens) - 1))
            frontier = level
            query_nodes = [tree_node for shape_node, tree_node in level if drafter.shape_children[shape_node]]
            if not query_nodes or depth == drafter.depth:
                break
            fed_before = list(self.fed)
            self.fed.extend(query_nodes)
            feeding = list(query_nodes)
            self.mask.extend(torch.ones(len(rows), len(query_nodes), dtype=torch.bool, device=device))
            ancestors = ancestor_matrix(tuple(parents)).to(device)
            step_nodes = [0, *fed_before, *query_nodes]
            visible = torch.cat([torch.ones(len(query_nodes), 1, dtype=torch.bool, device=device),  # pending slot
                                 ancestors[query_nodes][:, step_nodes]], dim=-1)
            inputs = torch.stack([tokens[node] for node in query_nodes], dim=-1).to(device)
            positions = (base + depth)[:, None].expand(-1, len(query_nodes))
        stacked = torch.stack(tokens, dim=-1)
        return [TokenTree(stacked[index], tuple(parents), [probs[node][index] for node in range(len(parents))])
                for index in range(len(rows))]

    def accepted(self, rows: list[BatchRow], trees: list[TokenTree], verdicts: list[Verdict], out: LMOutput) -> None:
        """Keep each row's accepted path in the draft cache; an accepted node never fed waits as the row's
        pending token."""
        first = self.step_start + 2
        for index, (row, tree, verdict) in enumerate(zip(rows, trees, verdicts)):
            self.works[index].settle(row.ctx.counters, useful_nodes(verdict))
            path = set(verdict.path)
            if self.fed:
                kept = torch.tensor([node in path for node in self.fed], device=self.mask.valid.device)
                self.mask.valid[index, first:first + len(self.fed)] = kept
            last = verdict.path[-1]
            row.pending = int(tree.tokens[last]) if last != 0 and last not in self.fed else None

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep.to(self.lm.device))
        self.mask.select(keep)
        self.works = [self.works[index] for index in keep.tolist()]
