"""Any adapter that opts in (``batch_row``) drafting the rows of a static batch: each row drafts with its own
copy of the adapter (the weights shared, the state its own), one row after another, from the row's slice of the
batched target forwards; the target then verifies every row's tree in one forward. The drafter's work is B
batch-1 drafts per step (the load study times it as drafter time), and each row's drafts are the ones a batch-1
generation of that prompt would make."""

from __future__ import annotations

import torch

from harness.backend.forward import LMOutput
from harness.engine.batch_slots import BatchRow, row_output
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

