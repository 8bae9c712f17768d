"""Every row of a static batch drafted by one EAGLE head at once (``EagleAdapter.batch_drafting``).

Per step: one catch-up forward over every row's not-yet-fed true features (left-padded to the longest; the pads'
slots masked), then one forward per tree depth over every row's frontier (k nodes a row, each seeing its row's
prefix and its own ancestors), the rows' beams grown in lockstep (``grow_beam_trees``). The head's KV cache is
one cache for the batch with a slot mask (``SharedCacheRows``); after verification the frontier slots, the same
count for every row, go, and a catch-up pad stays masked. Each row keeps its bookkeeping in its own copy of the
adapter and commits as batch-1 does; its tree is the one the batch-1 adapter drafts from the same state (the same
beam code, the same inputs), and each row is charged its own share of every forward, as batch-1 charges it.
"""

from __future__ import annotations

import torch

from harness.engine.batch_adapters import SharedCacheRows
from harness.engine.adapter import BatchRow
from harness.engine.batch_slots import PAD_TOKEN, causal, pending_block
from harness.engine.counters import book_drafting_forward
from harness.engine.drafting import beam_draws
from harness.trees.beam import Frontier, frontier_attention_bias, grow_beam_trees
from harness.trees.tree import TokenTree


class EagleRows(SharedCacheRows):
    """The batch's head cache and one adapter copy per row (its pending true features, how many of its positions
    the head has fed, its beam and its drafter work of the step)."""

    def __init__(self, adapter, count: int) -> None:
        super().__init__(adapter, count, adapter.head.config, adapter.runner.device)
        self.runner = adapter.runner

    def draft(self, rows: list[BatchRow]) -> list[TokenTree]:
        root_hidden = self.catch_up(rows)
        root_logprobs = self.runner.logprobs(root_hidden)
        self.kept_slots = self.mask.valid.shape[-1]  # the frontiers' slots, after it, go after verification
        outputs: list[torch.Tensor] = []  # per expanded depth: the head's outputs (B, k, H)
        expanded: list[list[Frontier]] = []  # per expanded depth: every row's frontier

        def expand_rows(frontiers: list[Frontier]) -> list[torch.Tensor]:
            expanded.append(frontiers)
            out = self.expand(rows, expanded, root_hidden, outputs)
            outputs.append(out)
            return list(self.runner.logprobs(out))

        roots = [torch.tensor(row.root, device=row.prompt.device) for row in rows]
        shape = self.adapters[0].shape
        beams = grow_beam_trees(roots, root_logprobs, expand_rows, shape, self.runner.token_map,
                                [beam_draws(row.ctx, shape) for row in rows])
        for copy, beam in zip(self.adapters, beams):
            copy.beam = beam
            beam.tree.resolve()  # the batch's tree mask and positions are built on the host
        return [beam.tree for beam in beams]

    def catch_up(self, rows: list[BatchRow]) -> torch.Tensor:
        """One forward over every row's pending features and the tokens after them (a row's real entries last,
        so every row's last output is its root's); each row charged its own tokens. Returns (B, H)."""
        copies, device = self.adapters, self.device
        counts = [copy.pending.shape[0] for copy in copies]
        features, position_ids, real = pending_block([copy.pending for copy in copies],
                                                     [copy.fed_len for copy in copies])
        width = features.shape[1]
        tokens = torch.full((len(rows), width), PAD_TOKEN, dtype=torch.long, device=device)
        for index, (copy, row, count) in enumerate(zip(copies, rows, counts)):
            tokens[index, width - count:] = row.sequence()[0, copy.fed_len + 1 : copy.fed_len + 1 + count].to(device)
        block = self.mask.extend(real)
        head, _ = copies[0].step_head(1)
        hidden = head(features, tokens, position_ids, self.cache,
                      self.mask.bias(causal(width, device), block, self.runner.dtype))
        for copy, row, count in zip(copies, rows, counts):
            flops = self.runner.cost.forward_flops(count, copy.fed_len + count, 1)
            row.ctx.counters.drafter.add(count, flops)
            book_drafting_forward(row.ctx.counters, copy.work, flops, count)  # its last position drafts depth 1
            copy.fed_len += count
        return hidden[:, -1]

    def expand(self, rows: list[BatchRow], expanded: list[list[Frontier]], root_hidden: torch.Tensor,
               outputs: list[torch.Tensor]) -> torch.Tensor:
        """One forward over every row's newest frontier (B, k): each node fed the predicted feature of its parent,
        seeing its row's prefix, its ancestors and itself. Returns the head's outputs (B, k, H)."""
        device, frontiers = self.device, expanded[-1]
        depth, k = frontiers[0].depth, frontiers[0].tokens.shape[0]
        if not outputs:
            inputs = root_hidden[:, None].expand(-1, k, -1)
        else:
            inputs = torch.stack([outputs[-1][index].index_select(0, frontier.parent_rows)
                                  for index, frontier in enumerate(frontiers)])
        tokens = torch.stack([frontier.tokens for frontier in frontiers]).to(device)
        fed = torch.tensor([copy.fed_len for copy in self.adapters], device=device)
        ancestry = torch.stack([frontier_attention_bias([row[index] for row in expanded], 0, self.runner.dtype)[0, 0]
                                for index in range(len(rows))]) == 0  # (B, k, depth * k): ancestors and itself
        self.mask.extend(torch.ones(len(rows), k, dtype=torch.bool, device=device))
        head, _ = self.adapters[0].step_head(depth + 1)
        out = head(inputs, tokens, fed[:, None].expand(-1, k) + (depth - 1), self.cache,
                   self.mask.bias(ancestry, self.kept_slots, self.runner.dtype))
        for copy, row in zip(self.adapters, rows):
            flops = self.runner.cost.forward_flops(k, copy.fed_len + depth * k, k)
            row.ctx.counters.drafter.add(k, flops)
            copy.work.charge([(depth, node) for node in range(k)], flops)
        return out
