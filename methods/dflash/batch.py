"""Every row of a static batch drafted by one DFlash forward a step (``DFlashAdapter.batch_drafting``).

Per step one drafter forward for the batch: every row's context rows not yet seen (left-padded to the longest,
the pads' slots masked) and its block [root, MASK x (B - 1)] at its own positions, each block attending to its
row's whole context and to itself. The drafter's KV cache is one cache for the batch with a slot mask
(``SharedCacheRows``); the blocks' slots, the same count for every row, go, as batch-1 drops them. Each row then
draws its chain or beam tree from its block's logits with its own copy of the adapter (``tree_from_logits``),
which keeps its drafter work and pending context rows as batch-1 does (``charge_block``, ``commit``).
"""

from __future__ import annotations

import torch

from harness.engine.batch_adapters import SharedCacheRows
from harness.engine.adapter import BatchRow
from harness.engine.batch_slots import pending_block
from harness.trees.tree import TokenTree


class DFlashRows(SharedCacheRows):
    """The batch's drafter cache and one adapter copy per row."""

    def __init__(self, adapter, count: int) -> None:
        super().__init__(adapter, count, adapter.drafter.config, adapter.device)

    def draft(self, rows: list[BatchRow]) -> list[TokenTree]:
        copies, drafter, device = self.adapters, self.adapters[0].drafter, self.device
        block = copies[0].block_size
        counts = [copy.pending[0].shape[0] for copy in copies]
        context, context_positions, real = pending_block([drafter.context(copy.pending) for copy in copies],
                                                         [copy.fed_len for copy in copies])
        start = self.mask.extend(real)
        self.kept_slots = self.mask.extend(torch.ones(len(rows), block, dtype=torch.bool, device=device))
        roots = [torch.tensor(row.root, device=row.prompt.device) for row in rows]
        blocks = torch.stack([copy.block_input(root) for copy, root in zip(copies, roots)])
        block_positions = (torch.tensor([copy.fed_len + count for copy, count in zip(copies, counts)],
                                        device=device)[:, None] + torch.arange(block, device=device))
        visible = torch.ones(block, context.shape[1] + block, dtype=torch.bool, device=device)
        hidden = drafter(context, blocks, torch.cat([context_positions, block_positions], dim=-1), self.cache,
                         self.mask.bias(visible, start, copies[0].dtype))
        logits = drafter.logits(drafter.draft_rows(hidden)[:, :copies[0].verified], copies[0].lm_head)
        trees = []
        for index, (copy, row, root) in enumerate(zip(copies, rows, roots)):
            copy.charge_block(row.ctx, counts[index])
            tree = copy.tree_from_logits(row.ctx, root, logits[index])
            tree.resolve()  # the batch's tree mask and positions are built on the host
            trees.append(tree)
        return trees
