"""Every row of a static batch drafted by one EAGLE head at once (``EagleAdapter.batch_drafting``).

Per step: one catch-up forward over every row's not-yet-fed true features (left-padded to the longest; the pads'
slots masked), then one forward per tree depth over every row's frontier (k nodes a row, each seeing its row's
prefix and its own ancestors), the rows' beams grown in lockstep (``grow_beam_trees``). The head's KV cache is
one cache for the batch with a slot mask (``SlotMask``, as the target's in ``harness.engine.batched``); after
verification the frontier slots, the same count for every row, are cropped, and a catch-up pad stays masked. Each
row's tree is the one the batch-1 adapter drafts from the same state (the same beam code, the same inputs), and
each row is charged its own share of every forward (its tokens and its keys), as batch-1 charges it.
"""

from __future__ import annotations

import torch

from harness.analysis.metrics import PREFILL_TOKENS
from harness.backend.device import index_on
from harness.backend.forward import LMOutput
from harness.backend.kv_cache import crop_cache, new_cache
from harness.engine.batch_slots import PAD_TOKEN, BatchRow, SlotMask, causal, pending_block, row_output
from harness.engine.counters import DrafterWork, count_useful_drafter_flops
from harness.trees.beam import BeamTree, Frontier, frontier_attention_bias, grow_beam_trees
from harness.trees.tree import TokenTree
from harness.verify.verdict import Verdict


class EagleRows:
    """The rows' head state: one KV cache and slot mask, and per row its pending true features, how many of its
    positions the head has fed, its beam and its drafter work of the step."""

    wants_hidden = True

    def __init__(self, adapter) -> None:
        self.adapter, self.runner = adapter, adapter.runner
        self.hidden_layers = adapter.target_hidden_layers
        self.cache = new_cache(adapter.head.config)
        self.mask = SlotMask(torch.zeros(0, 0, dtype=torch.bool, device=self.runner.device))
        self.pending: list[torch.Tensor] = []  # per row: (n, H) true features of positions fed.. not yet fed
        self.fed: list[int] = []
        self.beams: list[BeamTree] = []
        self.works: list[DrafterWork] = []
        self.frontier_start = 0  # the head cache's first slot of the step's frontiers

    def prefill(self, rows: list[BatchRow], ids: torch.Tensor, valid: torch.Tensor, position_ids: torch.Tensor,
                out: LMOutput) -> None:
        """Each row's prompt features (its left padding cut) wait for the first catch-up."""
        self.mask = SlotMask(valid[:, :0].to(self.runner.device))
        self.pending, self.fed, self.works = [], [], []
        for index, row in enumerate(rows):
            pad = ids.shape[-1] - row.prompt.shape[-1]
            states = row_output(out, index, slice(pad, None)).hidden_states
            self.pending.append(self.adapter._features(states, slice(None)))
            self.fed.append(0)
            self.works.append(DrafterWork())
            row.ctx.counters.add_extra(PREFILL_TOKENS, row.prompt.shape[-1])

    def draft(self, rows: list[BatchRow]) -> list[TokenTree]:
        root_hidden = self.catch_up(rows)
        root_logprobs = self.runner.logprobs(root_hidden)
        self.frontier_start = self.mask.valid.shape[-1]
        outputs: list[torch.Tensor] = []  # per expanded depth: the head's outputs (B, k, H)
        expanded: list[list[Frontier]] = []  # per expanded depth: every row's frontier

        def expand_rows(frontiers: list[Frontier]) -> list[torch.Tensor]:
            expanded.append(frontiers)
            out = self.expand(rows, expanded, root_hidden, outputs)
            outputs.append(out)
            return list(self.runner.logprobs(out))

        roots = [torch.tensor(row.root, device=row.prompt.device) for row in rows]
        self.beams = grow_beam_trees(roots, root_logprobs, expand_rows, self.adapter.shape)
        for beam in self.beams:
            beam.tree.resolve()  # the batch's tree mask and positions are built on the host
        return [beam.tree for beam in self.beams]

    def catch_up(self, rows: list[BatchRow]) -> torch.Tensor:
        """One forward over every row's pending features and the tokens after them (a row's real entries last,
        so every row's last output is its root's); each row charged its own tokens. Returns (B, H)."""
        device = self.runner.device
        counts = [pending.shape[0] for pending in self.pending]
        features, position_ids, real = pending_block(self.pending, self.fed)
        width = features.shape[1]
        tokens = torch.full((len(rows), width), PAD_TOKEN, dtype=torch.long, device=device)
        for index, (row, count) in enumerate(zip(rows, counts)):
            fed = self.fed[index]
            tokens[index, width - count:] = row.sequence()[0, fed + 1 : fed + 1 + count].to(device)
        block = self.mask.extend(real)
        head, _ = self.adapter.step_head(1)
        hidden = head(features, tokens, position_ids, self.cache,
                      self.mask.bias(causal(width, device), block, self.runner.dtype))
        for index, (row, count) in enumerate(zip(rows, counts)):
            flops = self.runner.cost.forward_flops(count, self.fed[index] + count, 1)
            row.ctx.counters.drafter.add(count, flops)
            count_useful_drafter_flops(row.ctx.counters, flops)
            self.fed[index] += count
        return hidden[:, -1]

    def expand(self, rows: list[BatchRow], expanded: list[list[Frontier]], root_hidden: torch.Tensor,
               outputs: list[torch.Tensor]) -> torch.Tensor:
        """One forward over every row's newest frontier (B, k): each node fed the predicted feature of its parent,
        seeing its row's prefix, its ancestors and itself. Returns the head's outputs (B, k, H)."""
        device, frontiers = self.runner.device, expanded[-1]
        depth, k = frontiers[0].depth, frontiers[0].tokens.shape[0]
        if not outputs:
            inputs = root_hidden[:, None].expand(-1, k, -1)
        else:
            inputs = torch.stack([outputs[-1][index].index_select(0, frontier.parent_rows)
                                  for index, frontier in enumerate(frontiers)])
        tokens = torch.stack([frontier.tokens for frontier in frontiers]).to(device)
        position_ids = torch.tensor(self.fed, device=device)[:, None].expand(-1, k) + (depth - 1)
        ancestry = torch.stack([frontier_attention_bias([row[index] for row in expanded], 0, self.runner.dtype)[0, 0]
                                for index in range(len(rows))]) == 0  # (B, k, depth * k): ancestors and itself
        self.mask.extend(torch.ones(len(rows), k, dtype=torch.bool, device=device))
        head, _ = self.adapter.step_head(depth + 1)
        out = head(inputs, tokens, position_ids, self.cache,
                   self.mask.bias(ancestry, self.frontier_start, self.runner.dtype))
        for index, row in enumerate(rows):
            flops = self.runner.cost.forward_flops(k, self.fed[index] + depth * k, k)
            row.ctx.counters.drafter.add(k, flops)
            self.works[index].charge([(depth, node) for node in range(k)], flops)
        return out

    def accepted(self, rows: list[BatchRow], trees: list[TokenTree], verdicts: list[Verdict], out: LMOutput) -> None:
        """Settle each row's drafter work, drop the frontier slots (built on predicted features) and keep the
        accepted path's true features for the next catch-up."""
        crop_cache(self.cache, self.frontier_start)
        self.mask.valid = self.mask.valid[:, : self.frontier_start]
        for index, (row, tree, verdict) in enumerate(zip(rows, trees, verdicts)):
            slots = self.beams[index].parent_slots
            self.works[index].settle(row.ctx.counters, [slots[node] for node in verdict.path[1:] if node < len(slots)])
            states = row_output(out, index, slice(0, tree.size)).hidden_states
            self.pending[index] = self.adapter._features(states, index_on(verdict.path, out.logits.device))

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep.to(self.runner.device))
        self.mask.select(keep)
        chosen = keep.tolist()
        self.pending = [self.pending[index] for index in chosen]
        self.fed = [self.fed[index] for index in chosen]
        self.works = [self.works[index] for index in chosen]
