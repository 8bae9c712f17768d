"""Every row of a static batch drafted by one Lyanna backbone at once (``LyannaAdapter.batch_drafting``).

Lyanna's depth states do not depend on any draft token, so the backbone's work batches whole: per step one
catch-up forward over every row's not-yet-fed true features (left-padded to the longest, the pads' slots masked),
then one single-token forward per further depth for every row, each fed the row's own previous state. Each row
then grows its tree from its states with its own copy of the adapter (``tree_from_states``: the logits, the
parent-token injection, the beam, the previous round's logits), and settles its work as batch-1 does
(``settle``, ``take_features``). The backbone's KV cache is one cache for the batch with a slot mask; the depth
steps' slots, the same count for every row, are cropped after verification. Reuse of states (and so the
run-ahead, ``overlap``) keeps a row's speculative cache entries, which a shared cache does not: those settings
draft their rows one after another (``batch_row``).
"""

from __future__ import annotations

import torch

from harness.backend.forward import LMOutput
from harness.backend.kv_cache import crop_cache, new_cache
from harness.engine.batch_slots import BatchRow, SlotMask, causal, pending_block, row_output
from harness.engine.counters import count_useful_drafter_flops
from harness.trees.tree import TokenTree
from harness.verify.verdict import Verdict


class LyannaRows:
    """The batch's backbone cache and slot mask, and one adapter copy per row (its round's bookkeeping)."""

    wants_hidden = True

    def __init__(self, adapter) -> None:
        self.adapter = adapter
        self.hidden_layers = adapter.target_hidden_layers
        self.cache = new_cache(adapter.drafter.config)
        self.mask = SlotMask(torch.zeros(0, 0, dtype=torch.bool, device=adapter.device))
        self.copies: list = []
        self.chain_start = 0  # the cache's first slot of the step's depth steps

    def prefill(self, rows: list[BatchRow], ids: torch.Tensor, valid: torch.Tensor, position_ids: torch.Tensor,
                out: LMOutput) -> None:
        """Each row's copy begins on the row's part of the prefill (its left padding cut)."""
        self.cache = new_cache(self.adapter.drafter.config)
        self.mask = SlotMask(valid[:, :0].to(self.adapter.device))
        self.copies = [self.adapter.batch_row() for _ in rows]
        for index, (copy, row) in enumerate(zip(self.copies, rows)):
            pad = ids.shape[-1] - row.prompt.shape[-1]
            copy.begin(row.ctx, row.prompt, row_output(out, index, slice(pad, None)))

    def draft(self, rows: list[BatchRow]) -> list[TokenTree]:
        states = self.catch_up(rows)
        self.chain_start = self.mask.valid.shape[-1]
        for offset in range(1, self.adapter.shape.depth):
            self.depth_step(rows, states, offset)
        trees = []
        for copy, row, row_states in zip(self.copies, rows, states):
            tree = copy.tree_from_states(row.ctx, torch.tensor(row.root, device=row.prompt.device), row_states)
            tree.resolve()  # the batch's tree mask and positions are built on the host
            trees.append(tree)
        return trees

    def catch_up(self, rows: list[BatchRow]) -> list[dict[int, torch.Tensor]]:
        """One forward over every row's pending inputs; each row's last output is the state of its first depth
        (the root's children). Each row charged its own tokens, as useful work."""
        drafter = self.adapter.drafter
        inputs, position_ids, real = pending_block([copy.pending for copy in self.copies],
                                                   [copy.fed_len for copy in self.copies])
        block = self.mask.extend(real)
        out = drafter(inputs, position_ids, self.cache, self.mask.bias(causal(inputs.shape[1], inputs.device), block,
                                                                      self.adapter.dtype))
        states = []
        for index, (copy, row) in enumerate(zip(self.copies, rows)):
            first = row.position  # the root's position: depth-1 nodes sit after it
            copy.depth_positions = list(range(first, first + copy.shape.depth))
            count = copy.pending.shape[0]
            flops = copy.cost.forward_flops(count, copy.fed_len + count, 0)
            row.ctx.counters.drafter.add(count, flops)
            count_useful_drafter_flops(row.ctx.counters, flops)
            copy.fed_len += count
            copy.computed = {first}
            states.append({first: out[index, -1]})
        return states

    def depth_step(self, rows: list[BatchRow], states: list[dict[int, torch.Tensor]], offset: int) -> None:
        """One backbone step for every row: fed its state of depth ``offset`` at that position, it predicts the
        next depth's state (work charged to that state, useful once a node of that depth is accepted)."""
        drafter, device = self.adapter.drafter, self.adapter.device
        positions = [copy.depth_positions[offset] for copy in self.copies]  # what each row's new state predicts
        previous = torch.stack([row_states[position - 1] for row_states, position in zip(states, positions)])
        start = self.mask.extend(torch.ones(len(rows), 1, dtype=torch.bool, device=device))
        position_ids = torch.tensor(positions, device=device)[:, None] - 1
        out = drafter(drafter.own_inputs(previous)[:, None], position_ids, self.cache,
                      self.mask.bias(causal(1, device), start, self.adapter.dtype))
        for index, (copy, row, position) in enumerate(zip(self.copies, rows, positions)):
            flops = copy.cost.forward_flops(1, copy.fed_len + offset, 0)
            row.ctx.counters.drafter.add(1, flops)
            copy.work.charge([("state", position)], flops)
            states[index][position] = out[index, -1]
            copy.computed.add(position)

    def accepted(self, rows: list[BatchRow], trees: list[TokenTree], verdicts: list[Verdict], out: LMOutput) -> None:
        """Each row settles its round and keeps its accepted path's true features; the depth steps' slots go."""
        crop_cache(self.cache, self.chain_start)
        self.mask.valid = self.mask.valid[:, : self.chain_start]
        for index, (copy, row, tree, verdict) in enumerate(zip(self.copies, rows, trees, verdicts)):
            copy.settle(row.ctx, verdict)
            copy.take_features(verdict, row_output(out, index, slice(0, tree.size)))

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep.to(self.adapter.device))
        self.mask.select(keep)
        self.copies = [self.copies[index] for index in keep.tolist()]
