"""Training P-EAGLE (``--opt parallel=K``): an EAGLE head that also drafts from mask slots.

The head keeps EAGLE's loss on the window's slots (pair (f_p, x_{p+1}) predicts f_{p+1} and the target's next-token
distribution there) and adds, after ``anchors`` anchors a of each window, a block of k - 1 mask slots
(``harness.training.mask_blocks``): mask j reads the head's learned mask embedding and feature at position a + j,
sees slots 0..a and the masks before it, and is trained by soft cross-entropy against the target's distribution at
slot a + j (the token a drafted chain's draft j + 1 is). The anchors are drawn from a generator seeded by the
options' seed and the batch's first tokens, so a resumed run draws what an uninterrupted one does.
"""

from __future__ import annotations

import torch

from harness.training.features import layer_key
from harness.training.mask_blocks import block_layout, choose_anchors, every_kth_anchor
from harness.training.objectives import token_loss
from methods.eagle.head import EagleHead


def block_outputs(head: EagleHead, batch: dict[str, torch.Tensor], anchors: list[int], k: int):
    """The head's outputs (B, N, H) over the window's pairs and the anchors' mask blocks, and their layout."""
    tokens = batch["input_ids"][:, 1:]
    features = head.input_features([batch[layer_key(layer)][:, :-1] for layer in head.features.layers])
    rows, length = tokens.shape
    layout = block_layout(length, anchors, k)
    slot_features = torch.cat([features, features.new_zeros(rows, layout.masks, features.shape[-1])], dim=1)
    slot_tokens = torch.cat([tokens, tokens.new_zeros(rows, layout.masks)], dim=1)
    position_ids = layout.positions.to(tokens.device)[None].expand(rows, -1)
    bias = layout.bias(features.dtype, tokens.device).expand(rows, 1, -1, -1)
    return head(slot_features, slot_tokens, position_ids, None, bias, masks=layout.masks), layout


def batch_anchors(batch: dict[str, torch.Tensor], length: int, k: int, count: int, seed: int) -> list[int]:
    """The batch's anchors, from a generator seeded by ``seed`` and the batch's first tokens."""
    key = int(batch["input_ids"][:, :4].sum())
    # host: the anchors are drawn on the host, the same on every machine
    return choose_anchors(length, k, count, torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + key))


def mask_loss(head: EagleHead, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor], k: int, anchors: int,
              objective: str, seed: int) -> torch.Tensor:
    """The mask slots' token loss: mask j of anchor a against the target's distribution at slot a + j."""
    following = batch["last"][:, 1:]
    outputs, layout = block_outputs(head, batch, batch_anchors(batch, following.shape[1], k, anchors, seed), k)
    slots = torch.arange(layout.length, layout.positions.numel())  # host: indexes the host layout, moved below
    wanted = layout.labels[slots] - 1  # the window slot whose output the mask stands in for
    target_probs = head.draft_vocab.next_token_probs(lm_head, following[:, wanted.to(following.device)])
    return token_loss(objective)(head.logits(outputs[:, slots.to(outputs.device)], lm_head), target_probs, None)


@torch.no_grad()
def parallel_agreement(head: EagleHead, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
                       k: int) -> list[float]:
    """Per draft position 1..k: how often the head's top-1 equals the target's, blocks tiling each window (draft 1
    from the anchor's own slot, draft j + 1 from its mask j)."""
    following = batch["last"][:, 1:]
    outputs, layout = block_outputs(head, batch, every_kth_anchor(following.shape[1], k), k)
    drafted = head.draft_vocab.to_target(head.logits(outputs, lm_head).argmax(-1))
    hits = layout.draft_hits(drafted, lm_head(following).argmax(-1))
    return [count / (following.shape[0] * len(layout.anchors)) for count in hits]
