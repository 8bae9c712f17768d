"""Mask-token blocks for training parallel drafters (PARD's draft LM, P-EAGLE's head): one forward over a window
and, after each of some anchors a, a block of ``k - 1`` mask slots at positions a + 1 .. a + k - 1.

Each window slot sees the window causally; each mask its anchor's prefix (slots 0..a) and the masks before it in
its block, so mask j is trained on what it sees when it drafts: the accepted text up to a and j masks. The masks
come after the window's slots, so a drafter that replaces its last slots' inputs by learned mask inputs reads them
as they are laid out here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BlockLayout:
    """Per slot (the window's ``length``, then the masks): its position, the window index of the token it predicts
    (-1: none; a window slot i predicts i + 1, mask j of anchor a predicts a + 1 + j) and which slots it sees."""

    length: int
    anchors: tuple[int, ...]
    positions: torch.Tensor
    labels: torch.Tensor
    visible: torch.Tensor

    @property
    def masks(self) -> int:
        return self.positions.numel() - self.length

    def mask_slots(self, j: int) -> torch.Tensor:
        """The slots of every block's mask j (1-based), in anchor order."""
        per_block = self.masks // max(1, len(self.anchors))
        return self.length + torch.arange(len(self.anchors)) * per_block + (j - 1)

    def draft_slots(self) -> list[torch.Tensor]:
        """Per draft position 1..k, the slots that draft it: the anchors themselves, then each block's mask j."""
        per_block = self.masks // max(1, len(self.anchors))
        return [torch.tensor(self.anchors), *(self.mask_slots(j) for j in range(1, per_block + 1))]

    def draft_hits(self, drafted: torch.Tensor, wanted: torch.Tensor) -> list[int]:
        """Per draft position, how many of its slots' top-1 tokens (``drafted``, (B, N)) equal the top-1 of the
        window slot each stands in for (``wanted``, (B, length)): held-out agreement's numerator."""
        return [int((drafted[:, slots] == wanted[:, self.labels[slots] - 1]).sum()) for slots in self.draft_slots()]

    def bias(self, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """The additive attention mask (1, 1, N, N)."""
        bias = torch.zeros(self.visible.shape, dtype=dtype).masked_fill_(~self.visible, torch.finfo(dtype).min)
        return bias.to(device)[None, None]


def block_layout(length: int, anchors: list[int], k: int) -> BlockLayout:
    """A window of ``length`` slots with a block of ``k - 1`` masks after each anchor."""
    masks = k - 1
    total = length + len(anchors) * masks
    visible = torch.zeros((total, total), dtype=torch.bool)
    visible[:length, :length] = torch.ones((length, length), dtype=torch.bool).tril()
    positions = torch.arange(total)
    labels = [*range(1, length), -1] + [0] * (total - length)
    for block, anchor in enumerate(anchors):
        start = length + block * masks
        visible[start: start + masks, : anchor + 1] = True
        visible[start: start + masks, start: start + masks] = torch.ones((masks, masks), dtype=torch.bool).tril()
        positions[start: start + masks] = torch.arange(anchor + 1, anchor + k)
        labels[start: start + masks] = range(anchor + 2, anchor + k + 1)
    return BlockLayout(length, tuple(anchors), positions, torch.tensor(labels), visible)


def choose_anchors(length: int, k: int, count: int, generator: torch.Generator) -> list[int]:
    """``count`` distinct anchors whose k predicted tokens lie in the window (all there are when fewer fit)."""
    room = length - k  # anchor a predicts up to a + k, which must be <= length - 1
    return sorted(torch.randperm(room, generator=generator)[: min(count, room)].tolist())


def every_kth_anchor(length: int, k: int) -> list[int]:
    """Anchors every k slots (held-out evaluation: blocks that tile the window)."""
    return list(range(0, length - k, k))
