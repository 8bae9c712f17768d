"""Every row of a static batch drafted by one Lyanna backbone at once (``LyannaAdapter.batch_drafting``).

Lyanna's depth states do not depend on any draft token, so the backbone's work batches whole: per step one
catch-up forward over every row's not-yet-fed true features (left-padded to the longest, the pads' slots masked),
then one single-token forward per further depth for every row, each fed the row's own previous state. Each row
then grows its tree from its states with its own copy of the adapter (``tree_from_states``: the logits, the
parent-token injection, the beam, the previous round's logits) and commits as batch-1 does. The backbone's KV
cache is one cache for the batch with a slot mask (``SharedCacheRows``); the depth steps' slots, the same count
for every row, go after verification. Reuse of states (and so the run-ahead, ``overlap``) keeps a row's
speculative cache entries, which a shared cache does not: those settings draft their rows one after another.
"""

from __future__ import annotations

import torch

from harness.engine.batch_adapters import SharedCacheRows
from harness.engine.adapter import BatchRow
from harness.engine.batch_slots import causal, pending_block
from harness.engine.counters import book_drafting_forward
from harness.trees.tree import TokenTree


class LyannaRows(SharedCacheRows):
    """The batch's backbone cache and one adapter copy per row (its round's bookkeeping)."""

    def __init__(self, adapter, count: int) -> None:
        super().__init__(adapter, count, adapter.drafter.config, adapter.device)

    def draft(self, rows: list[BatchRow]) -> list[TokenTree]:
        states = self.catch_up(rows)
        self.kept_slots = self.mask.valid.shape[-1]
        for offset in range(1, self.adapters[0].shape.depth):
            self.depth_step(rows, states, offset)
        trees = []
        for copy, row, row_states in zip(self.adapters, rows, states):
            tree = copy.tree_from_states(row.ctx, torch.tensor(row.root, device=row.prompt.device), row_states)
            tree.resolve()  # the batch's tree mask and positions are built on the host
            trees.append(tree)
        return trees

    def catch_up(self, rows: list[BatchRow]) -> list[dict[int, torch.Tensor]]:
        """One forward over every row's pending inputs; each row's last output is the state of its first depth
        (the root's children). Each row charged its own tokens (``book_drafting_forward``: its context positions
        useful, its last, drafting one charged to that first state)."""
        copies = self.adapters
        inputs, position_ids, real = pending_block([copy.pending for copy in copies],
                                                   [copy.fed_len for copy in copies])
        block = self.mask.extend(real)
        out = copies[0].drafter(inputs, position_ids, self.cache,
                                self.mask.bias(causal(inputs.shape[1], self.device), block, copies[0].dtype))
        states = []
        for index, (copy, row) in enumerate(zip(copies, rows)):
            first = row.position  # the root's position: depth-1 nodes sit after it
            copy.depth_positions = list(range(first, first + copy.shape.depth))
            count = copy.pending.shape[0]
            flops = copy.cost.forward_flops(count, copy.fed_len + count, 0)
            row.ctx.counters.drafter.add(count, flops)
            book_drafting_forward(row.ctx.counters, copy.work, flops, count, ("state", first))  # as batch-1's
            copy.fed_len += count
            copy.computed = {first}
            states.append({first: out[index, -1]})
        return states

    def depth_step(self, rows: list[BatchRow], states: list[dict[int, torch.Tensor]], offset: int) -> None:
        """One backbone step for every row: fed its state of depth ``offset`` at that position, it predicts the
        next depth's state (work charged to that state, useful once a node of that depth is accepted)."""
        copies, device = self.adapters, self.device
        drafter = copies[0].drafter
        positions = [copy.depth_positions[offset] for copy in copies]  # what each row's new state predicts
        previous = torch.stack([row_states[position - 1] for row_states, position in zip(states, positions)])
        start = self.mask.extend(torch.ones(len(rows), 1, dtype=torch.bool, device=device))
        position_ids = torch.tensor(positions, device=device)[:, None] - 1
        out = drafter(drafter.own_inputs(previous)[:, None], position_ids, self.cache,
                      self.mask.bias(causal(1, device), start, copies[0].dtype))
        for index, (copy, row, position) in enumerate(zip(copies, rows, positions)):
            flops = copy.cost.forward_flops(1, copy.fed_len + offset, 0)
            row.ctx.counters.drafter.add(1, flops)
            copy.work.charge([("state", position)], flops)
            states[index][position] = out[index, -1]
            copy.computed.add(position)
