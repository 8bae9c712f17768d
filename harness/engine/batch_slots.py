"""What every static-batch path shares: the slot mask over the rows' KV cache, the left-padded prompts, the trees of
one step, and each row's share of a batched forward (``harness.engine.batched`` drives them; a row, ``BatchRow``, and
the hooks of a batch drafter, ``RowsDrafting``, are part of the method contract, ``harness.engine.adapter``)."""

from __future__ import annotations

from dataclasses import dataclass
import torch

from harness.backend.forward import LMOutput, count_forward
from harness.backend.models import LoadedModel
from harness.engine.adapter import BatchRow
from harness.trees.tree import TokenTree, ancestor_matrix

PAD_TOKEN = 0  # what fills a masked slot (never attended, so any token id)


@dataclass
class SlotMask:
    """Which cache slots each row attends: (B, S) bool, one column per slot, grown by every forward's new slots."""

    valid: torch.Tensor

    def bias(self, visible: torch.Tensor, block_start: int, dtype: torch.dtype) -> torch.Tensor:
        """The additive mask (B, 1, q, S) of a forward whose q queries are the last q slots: each query sees the
        row's valid slots before ``block_start`` and, of the block from there, the valid ones ``visible`` allows it
        ((q, W) for every row, or (B, q, W) per row: its tree ancestors), and always itself (so a masked pad query
        still attends to something)."""
        rows = self.valid.shape[0]
        queries, width = visible.shape[-2:]
        visible = visible.expand(rows, queries, width)
        own = torch.zeros(queries, width, dtype=torch.bool, device=visible.device)
        own[torch.arange(queries, device=own.device), width - queries + torch.arange(queries, device=own.device)] = True
        block = (self.valid[:, None, block_start:] & visible) | own[None]
        allowed = torch.cat([self.valid[:, None, :block_start].expand(rows, queries, block_start), block], dim=-1)
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min)[:, None]

    def extend(self, new_valid: torch.Tensor) -> int:
        """Append the new slots' validity (B, n); the index of the first of them."""
        start = self.valid.shape[-1]
        self.valid = torch.cat([self.valid, new_valid.to(self.valid.device)], dim=-1)
        return start

    def select(self, rows: torch.Tensor) -> None:
        self.valid = self.valid[rows.to(self.valid.device)]


@dataclass
class PaddedTrees:
    """Every row's tree of one step, padded to one node count: tokens (B, n), per row which nodes are real
    (B, n) and which it sees ((B, n, n): its ancestors; a pad node only itself), and each node's depth (B, n)."""

    tokens: torch.Tensor
    real: torch.Tensor
    visible: torch.Tensor
    depths: torch.Tensor


def pad_trees(trees: list[TokenTree], device: torch.device) -> PaddedTrees:
    """The rows' trees padded to the largest: a pad node after a row's last node is masked and at depth 0."""
    count = max(tree.size for tree in trees)
    tokens = torch.full((len(trees), count), PAD_TOKEN, dtype=torch.long, device=device)
    real = torch.zeros(len(trees), count, dtype=torch.bool, device=device)
    visible = torch.eye(count, dtype=torch.bool, device=device).repeat(len(trees), 1, 1)
    depths = torch.zeros(len(trees), count, dtype=torch.long, device=device)
    for row, tree in enumerate(trees):
        size = tree.size
        tokens[row, :size] = tree.tokens.to(device)
        real[row, :size] = True
        visible[row, :size, :size] = ancestor_matrix(tree.parents).to(device)
        depths[row, :size] = torch.tensor(tree.depths, device=device)
    return PaddedTrees(tokens, real, visible, depths)


def left_padded(prompts: list[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The prompts (each (1, L_i)) left-padded to one length: ids (B, L), valid slots (B, L), positions (B, L)."""
    longest = max(prompt.shape[-1] for prompt in prompts)
    ids = torch.full((len(prompts), longest), PAD_TOKEN, dtype=torch.long)  # host: built on the host, moved below
    for row, prompt in enumerate(prompts):
        ids[row, longest - prompt.shape[-1]:] = prompt[0].cpu()
    # host: pad counts, built on the host as ids
    pads = torch.tensor([longest - prompt.shape[-1] for prompt in prompts])
    slots = torch.arange(longest)  # host: as ids, moved below
    return (ids.to(device), (slots[None] >= pads[:, None]).to(device),
            (slots[None] - pads[:, None]).clamp(min=0).to(device))


def pending_block(pending: list[torch.Tensor], starts: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every row's pending drafter inputs (each (n_i, H)) as one block for a batched catch-up forward, left-padded
    so that each row's newest input is the block's last: inputs (B, w, H), positions (B, w) (row i's from
    ``starts[i]``; 0 at a pad) and which entries are real (B, w)."""
    width = max(values.shape[0] for values in pending)
    inputs = pending[0].new_zeros(len(pending), width, pending[0].shape[-1])
    positions = torch.zeros(len(pending), width, dtype=torch.long, device=pending[0].device)
    real = torch.zeros(len(pending), width, dtype=torch.bool, device=pending[0].device)
    for row, (values, start) in enumerate(zip(pending, starts)):
        count = values.shape[0]
        inputs[row, width - count:] = values
        positions[row, width - count:] = torch.arange(start, start + count, device=values.device)
        real[row, width - count:] = True
    return inputs, positions, real


def row_output(out: LMOutput, row: int, nodes: slice) -> LMOutput:
    """Row ``row``'s part of a batched forward's output, at ``nodes``, as a batch-1 forward gives it (1, n, ...)."""
    states = None if out.hidden_states is None else tuple(
        None if state is None else state[row:row + 1, nodes] for state in out.hidden_states)
    return LMOutput(out.logits[row:row + 1, nodes], states, out.flops)


def charge_rows(lm: LoadedModel, rows: list[BatchRow], tally_of, tokens: list[int], keys: list[int]) -> list[float]:
    """Each row's share of one batched forward: a forward of its real ``tokens`` over its ``keys`` slots, on the
    tally ``tally_of(row.ctx.counters)`` (padding is counted by the caller, not charged to a row); each row's FLOPs."""
    return [count_forward(lm, tally_of(row.ctx.counters), count, total - count, count)
            for row, count, total in zip(rows, tokens, keys)]


def causal(count: int, device: torch.device) -> torch.Tensor:
    return torch.ones(count, count, dtype=torch.bool, device=device).tril()
