"""Any adapter that opts in (``batch_row``) drafting the rows of a static batch: each row drafts with its own
copy of the adapter (the weights shared, the state its own), one row after another, from the row's slice of the
batched target forwards; the target then verifies every row's tree in one forward. The drafter's work is B
batch-1 drafts per step (the load study times it as drafter time), and each row's drafts are the ones a batch-1
generation of that prompt would make. ``SharedCacheRows`` is the base of a drafter that serves every row in one
forward (``batch_drafting``): the row copies keep the bookkeeping, one KV cache the batch's drafter state."""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from harness.backend.forward import LMOutput
from harness.backend.kv_cache import crop_cache, new_cache
from harness.engine.adapter import BatchRow
from harness.engine.batch_slots import SlotMask, row_output
from harness.errors import DraftcountError
from harness.trees.tree import TokenTree, root_only
from harness.verify.verdict import Verdict


class RootOnlyRows:
    """`ar`: every row's tree is its root."""

    wants_hidden = False
    hidden_layers: tuple[int, ...] | None = None

    def prefill(self, rows: list[BatchRow], ids, valid, position_ids, out: LMOutput) -> None:
        pass

    def draft(self, rows: list[BatchRow]) -> list[TokenTree]:
        # host: a batch's trees are built on the host (pad_trees moves them)
        return [root_only(torch.tensor(row.root)) for row in rows]

    def accepted(self, rows: list[BatchRow], trees: list[TokenTree], verdicts: list[Verdict], out: LMOutput) -> None:
        pass

    def select(self, keep: torch.Tensor) -> None:
        pass


class AdapterRows:
    """One copy of the adapter per row (``adapter.batch_row()``), started, drafting and committing on the row's
    part of each batched forward, as ``harness.engine.loop`` drives one adapter."""

    def __init__(self, adapter, count: int) -> None:
        copies = [adapter.batch_row() for _ in range(count)]
        if any(copy is None for copy in copies):
            raise DraftcountError(f"{type(adapter).__name__} decodes one request at a time: batch sizes > 1 run "
                                  "methods whose adapter drafts a batch row (`batch_row`), see docs/extending.md")
        self.adapters = copies
        self.wants_hidden = adapter.wants_target_hidden_states
        self.hidden_layers = adapter.target_hidden_layers

    def prefill(self, rows: list[BatchRow], ids: torch.Tensor, valid: torch.Tensor, position_ids: torch.Tensor,
                out: LMOutput) -> None:
        """Each copy begins on its row's prompt and the row's part of the prefill (its left padding cut)."""
        for index, row in enumerate(rows):
            pad = ids.shape[-1] - row.prompt.shape[-1]
            self.adapters[index].begin(row.ctx, row.prompt, row_output(out, index, slice(pad, None)))

    def draft(self, rows: list[BatchRow]) -> list[TokenTree]:
        trees = []
        for adapter, row in zip(self.adapters, rows):
            tree = adapter.propose(row.ctx, row.sequence())
            tree.resolve()  # the batch's tree mask and positions are built on the host
            trees.append(tree)
        return trees

    def accepted(self, rows: list[BatchRow], trees: list[TokenTree], verdicts: list[Verdict], out: LMOutput) -> None:
        for index, (adapter, row, tree, verdict) in enumerate(zip(self.adapters, rows, trees, verdicts)):
            adapter.commit(row.ctx, tree, verdict, row_output(out, index, slice(0, tree.size)))

    def select(self, keep: torch.Tensor) -> None:
        self.adapters = [self.adapters[index] for index in keep.tolist()]


class SharedCacheRows(AdapterRows):
    """Row copies (as ``AdapterRows``: each begins and commits on its row's part of the target's forwards and keeps
    its row's drafter bookkeeping) whose drafter runs ONE forward for every row: its KV cache is one cache for the
    batch with a slot mask (``SlotMask``, as the target's). A subclass writes ``draft`` and sets ``kept_slots``, the
    cache slots that stay after verification (its speculative slots, the same count for every row, go)."""

    def __init__(self, adapter, count: int, config: PretrainedConfig, device: torch.device) -> None:
        super().__init__(adapter, count)
        self.device = device
        self.cache = new_cache(config)
        self.mask = SlotMask(torch.zeros(count, 0, dtype=torch.bool, device=device))
        self.kept_slots = 0

    def accepted(self, rows: list[BatchRow], trees: list[TokenTree], verdicts: list[Verdict], out: LMOutput) -> None:
        crop_cache(self.cache, self.kept_slots)
        self.mask.valid = self.mask.valid[:, : self.kept_slots]
        super().accepted(rows, trees, verdicts, out)

    def select(self, keep: torch.Tensor) -> None:
        super().select(keep)
        self.cache.batch_select_indices(keep.to(self.device))
        self.mask.select(keep)
