"""Mask-token blocks for training parallel drafters (PARD's draft LM, P-EAGLE's head): one forward over a window
and, after each of some anchors a, a block of ``k - 1`` mask slots at positions a + 1 .. a + k - 1.

Each window slot sees the window causally; each mask its anchor's prefix (slots 0..a) and the masks before it in
its block, so mask j is trained on what it sees when it drafts: the accepted text up to a and j masks. The masks
come after the window's slots, so a drafter that replaces its last slots' inputs by learned mask inputs reads them
as they are laid out here.

A block may be cut short (``kept``: PARD's conditional drop-token, ``drop_tokens``): an anchor that keeps m masks
trains masks 1..m, and a mask is only ever kept with every mask before it in its block, the prefix it reads.
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
    kept: tuple[int, ...]  # per block, its masks (k - 1 unless cut short)

    @property
    def masks(self) -> int:
        return self.positions.numel() - self.length

    def block_starts(self) -> list[int]:
        """Each block's first slot."""
        starts, slot = [], self.length
        for count in self.kept:
            starts.append(slot)
            slot += count
        return starts

    def mask_slots(self, j: int) -> torch.Tensor:
        """The slots of mask j (1-based) of every block that keeps it, in anchor order."""
        return torch.tensor([start + j - 1 for start, count in zip(self.block_starts(), self.kept) if count >= j],
                            dtype=torch.long)  # host: the layout lives on the host; its users move it

    def draft_slots(self) -> list[torch.Tensor]:
        """Per draft position 1..k, the slots that draft it: the anchors themselves, then each block's mask j."""
        # host: slots of the host layout, moved by their users
        return [torch.tensor(self.anchors), *(self.mask_slots(j) for j in range(1, max(self.kept, default=0) + 1))]

    def draft_hits(self, drafted: torch.Tensor, wanted: torch.Tensor) -> list[int]:
        """Per draft position, how many of its slots' top-1 tokens (``drafted``, (B, N)) equal the top-1 of the
        window slot each stands in for (``wanted``, (B, length)): held-out agreement's numerator."""
        return [int((drafted[:, slots] == wanted[:, self.labels[slots] - 1]).sum()) for slots in self.draft_slots()]

    def bias(self, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """The additive attention mask (1, 1, N, N)."""
        # host: built beside the host layout's mask, then moved
        bias = torch.zeros(self.visible.shape, dtype=dtype).masked_fill_(~self.visible, torch.finfo(dtype).min)
        return bias.to(device)[None, None]


def block_layout(length: int, anchors: list[int], k: int, kept: list[int] | None = None) -> BlockLayout:
    """A window of ``length`` slots with a block of ``k - 1`` masks after each anchor (``kept``: per anchor, the
    masks its block keeps, 0..k - 1)."""
    kept = [k - 1] * len(anchors) if kept is None else list(kept)
    if len(kept) != len(anchors) or any(not 0 <= count <= k - 1 for count in kept):
        raise ValueError(f"kept must give each of the {len(anchors)} anchors 0..{k - 1} masks, got {kept}")
    total = length + sum(kept)
    visible = torch.zeros((total, total), dtype=torch.bool)  # host: the layout lives on the host; its users move it
    visible[:length, :length] = torch.ones((length, length), dtype=torch.bool).tril()  # host: written into visible
    positions = torch.arange(total)  # host: the layout's, as visible
    labels = [*range(1, length), -1] + [0] * (total - length)
    start = length
    for anchor, masks in zip(anchors, kept):
        visible[start: start + masks, : anchor + 1] = True
        # host: written into the host layout's mask
        visible[start: start + masks, start: start + masks] = torch.ones((masks, masks), dtype=torch.bool).tril()
        positions[start: start + masks] = torch.arange(anchor + 1, anchor + 1 + masks)  # host: into positions
        labels[start: start + masks] = range(anchor + 2, anchor + 2 + masks)
        start += masks
    return BlockLayout(length, tuple(anchors), positions, torch.tensor(labels), visible, tuple(kept))  # host: the labels, as visible


def drop_tokens(anchors: int, k: int, ratio: float, minimum: float, generator: torch.Generator) -> list[int]:
    """PARD's conditional drop-token (COD): per anchor, how many of its k - 1 masks a training forward keeps. Mask
    j is kept by floor(anchors x max(ratio^j, minimum)) anchors, drawn at random among those that kept mask j - 1
    (a mask needs the masks before it), so the forward's mask slots fall from (k - 1) x anchors to about
    anchors x (ratio + ratio^2 + ...). ``ratio`` 1 keeps every mask."""
    kept = [0] * anchors
    alive = torch.arange(anchors)  # host: drawn with the host data generator
    for j in range(1, k):
        count = min(len(alive), int(anchors * max(ratio ** j, minimum)))
        alive = alive[torch.randperm(len(alive), generator=generator)[:count]]  # host: a host draw, read as a list
        for anchor in alive.tolist():
            kept[anchor] = j
    return kept


def choose_anchors(length: int, k: int, count: int, generator: torch.Generator) -> list[int]:
    """``count`` distinct anchors whose k predicted tokens lie in the window (all there are when fewer fit)."""
    room = length - k  # anchor a predicts up to a + k, which must be <= length - 1
    return sorted(torch.randperm(room, generator=generator)[: min(count, room)].tolist())  # host: read as a list


def every_kth_anchor(length: int, k: int) -> list[int]:
    """Anchors every k slots (held-out evaluation: blocks that tile the window)."""
    return list(range(0, length - k, k))
