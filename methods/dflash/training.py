"""Training a DFlash drafter: ``python -m harness train --method dflash --target T --data D --out DIR``.

Masked blocks at random anchors (SpecForge's recipe, which z-lab co-maintains): each row of a batch gets ``anchors``
anchor positions a; each block is [x_a, MASK x (B - 1)] at positions a..a+B-1, attends to the injected context of
the positions before a and to itself (not to the other blocks), all blocks in one forward over the row's context.
Slot k (1..B-1) is trained towards the target's distribution of x_{a+k} (soft cross-entropy, or the objective
named), weighted exp(-(k - 1) / gamma) (gamma 7 for B >= 16, 5 for B >= 10, else 4). The drafter's layers, ``fc``,
``hidden_norm``, ``norm`` and (without a mask token) its mask embedding are trained; the target's embedding and LM
head stay frozen (or, with ``own_embedding`` / ``own_lm_head``, copies of them are trained with the drafter). ``dspark`` trains its backbone the same way (every slot drafting: ``anchor_predicts``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.backend.models import LoadedModel, text_config
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.draft_vocab import DraftVocab, choose_draft_vocab
from harness.training.drafters import (
    budgeted,
    DrafterLoopOptions, DrafterTrainRequest, Fitted, feature_source, fit_drafter, frozen_target, train_drafter,
)
from harness.training.features import FeatureSource, layer_key
from harness.training.objectives import token_loss, uses_tree_loss
from methods.dflash.checkpoint import new_drafter, save_drafter
from methods.dflash.model import DFlashDrafter, default_target_layers


@dataclass(frozen=True)
class DFlashTrainOptions(DrafterLoopOptions):
    layers: int = 2  # drafter layers (z-lab: 5 on 8B targets)
    block_size: int = 8  # B: the block of one forward (z-lab: 16)
    target_layers: tuple[int, ...] = ()  # 0-based target layers injected (default: as many as drafter layers, spaced)
    mask_token_id: int = -1  # a target vocabulary id as the mask token (-1: a learned mask embedding)
    anchors: int = 8  # anchor blocks per row and batch
    loss_gamma: float = 0.0  # the positions' weight decay exp(-(k - 1) / gamma) (0: z-lab's for the block size)
    intermediate_size: int = 0  # the layers' MLP width (0: the target's)
    own_embedding: bool = False  # train a copy of the target's embedding (default: share the target's, frozen)
    own_lm_head: bool = False  # train a copy of the target's LM head (default: share the target's, frozen)

    def __post_init__(self) -> None:
        super().__post_init__()
        if uses_tree_loss(self.objective):
            raise DraftcountError(f"dflash trains with a token-level objective; {self.objective!r} adds a tree loss "
                                  f"that only the eagle trainer implements")
        if self.layers < 1 or self.block_size < 2 or self.anchors < 1 or self.loss_gamma < 0:
            raise DraftcountError(f"dflash training needs layers >= 1, block_size >= 2, anchors >= 1 and "
                                  f"loss_gamma >= 0, got {self.layers}, {self.block_size}, {self.anchors}, "
                                  f"{self.loss_gamma}")
        if self.seq_len < self.block_size + 1:
            raise DraftcountError(f"dflash training needs seq_len > block_size ({self.block_size}), got {self.seq_len}")

    @property
    def gamma(self) -> float:
        return self.loss_gamma or (7.0 if self.block_size >= 16 else 5.0 if self.block_size >= 10 else 4.0)


def draw_anchors(rows: int, length: int, block: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """(rows, count) sorted anchor positions in 0..length - block - 1 (so that every slot's label, at most
    a + block, lies in the row), distinct within a row where the row allows it."""
    room = length - block
    count = min(count, room)
    scores = torch.rand(rows, room, generator=generator)  # host: the anchors' host draws
    return scores.topk(count, dim=-1).indices.sort(dim=-1).values


def block_attention_bias(anchors: torch.Tensor, length: int, block: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask (rows, 1, A * B, length + A * B): block j's queries see the context keys before its anchor
    and its own block's keys."""
    rows, count = anchors.shape
    context = torch.arange(length, device=anchors.device)[None, None, :] < anchors[:, :, None]  # (rows, A, length)
    context = context.repeat_interleave(block, dim=1)
    owner = torch.arange(count * block, device=anchors.device) // block
    own = (owner[:, None] == owner[None, :]).expand(rows, -1, -1)
    visible = torch.cat([context, own], dim=-1)
    bias = torch.zeros(visible.shape, dtype=dtype, device=anchors.device)
    return bias.masked_fill(~visible, torch.finfo(dtype).min)[:, None]


def block_outputs(drafter: DFlashDrafter, embed: torch.nn.Module, batch: dict[str, torch.Tensor],
                  anchors: torch.Tensor) -> torch.Tensor:
    """(rows, A, B, width) outputs of the blocks at ``anchors`` over each row's whole context."""
    tokens = batch["input_ids"]
    rows, length = tokens.shape
    count, block = anchors.shape[1], drafter.block_size
    embed = drafter.input_embedding(embed)
    context = drafter.context([batch[layer_key(layer)] for layer in drafter.features.layers])
    roots = embed(tokens.gather(1, anchors)).to(context.dtype)  # (rows, A, width)
    blocks = drafter.block_embeddings(roots, embed, block).reshape(rows, count * block, -1)
    offsets = torch.arange(block, device=tokens.device)
    block_positions = (anchors[:, :, None] + offsets).reshape(rows, -1)
    position_ids = torch.cat([torch.arange(length, device=tokens.device).expand(rows, -1), block_positions], dim=1)
    bias = block_attention_bias(anchors, length, block, context.dtype)
    return drafter(context, blocks, position_ids, None, bias).reshape(rows, count, block, -1)


def label_positions(drafter: DFlashDrafter, anchors: torch.Tensor) -> torch.Tensor:
    """(rows, A, drafts): the position each drafting slot's token sits at (a + k, or a + k + 1 for DeepSpec's)."""
    first = 0 if drafter.anchor_predicts else 1
    slots = torch.arange(first, drafter.block_size, device=anchors.device) + (1 - first)
    return anchors[:, :, None] + slots


def slot_weights(drafts: int, gamma: float, device: torch.device) -> torch.Tensor:
    """(drafts,) exp(-k / gamma) for the k-th drafting slot (0-based)."""
    return torch.exp(-torch.arange(drafts, device=device, dtype=torch.float32) / gamma)


def target_probs_at(lm_head: torch.nn.Module, last: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(rows, A, drafts, V): the target's next-token distribution for the token at each label position (read at
    the position before it), over the target's whole vocabulary."""
    rows = torch.arange(last.shape[0], device=last.device)[:, None, None]
    with torch.no_grad():
        return torch.softmax(lm_head(last[rows, labels - 1]).float(), dim=-1)


def weighted_token_loss(objective: str, logits: torch.Tensor, probs: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The objective's token loss with each slot's weight (a mean over rows, anchors and the weighted slots)."""
    mask = weights.expand(logits.shape[:-1])
    return token_loss(objective)(logits, probs, mask)


def dflash_loss(drafter: DFlashDrafter, embed: torch.nn.Module, lm_head: torch.nn.Module,
                batch: dict[str, torch.Tensor], options: DFlashTrainOptions) -> torch.Tensor:
    tokens = batch["input_ids"]
    anchors = draw_anchors(tokens.shape[0], tokens.shape[1], drafter.block_size, options.anchors,
                           anchor_generator(batch, options.seed))
    anchors = anchors.to(tokens.device)
    outputs = drafter.draft_rows(block_outputs(drafter, embed, batch, anchors))
    labels = label_positions(drafter, anchors)
    weights = slot_weights(labels.shape[-1], options.gamma, tokens.device)
    return weighted_token_loss(options.objective, drafter.logits(outputs, lm_head),
                               drafter.draft_vocab.restrict(target_probs_at(lm_head, batch["last"], labels)), weights)


def evenly_spaced_anchors(batch: dict[str, torch.Tensor], block: int) -> torch.Tensor:
    """(rows, count) anchors 0, B, 2B, ... of a held-out batch, every one with its block's labels in the row (for
    either convention: the last anchor is at most length - 2B)."""
    tokens = batch["input_ids"]
    count = max(1, (tokens.shape[1] - block) // block)
    return (torch.arange(count, device=tokens.device)[None] * block).expand(tokens.shape[0], -1)


@torch.no_grad()
def block_agreement(drafter: DFlashDrafter, embed: torch.nn.Module, lm_head: torch.nn.Module,
                    batch: dict[str, torch.Tensor]) -> list[float]:
    """Per drafting slot: how often its top-1 equals the target's at evenly spaced anchors (context: the truth)."""
    anchors = evenly_spaced_anchors(batch, drafter.block_size)
    outputs = drafter.draft_rows(block_outputs(drafter, embed, batch, anchors))
    wanted = target_probs_at(lm_head, batch["last"], label_positions(drafter, anchors)).argmax(-1)
    hits = drafter.draft_vocab.to_target(drafter.logits(outputs, lm_head).argmax(-1)) == wanted
    return [float(value) for value in hits.float().mean(dim=(0, 1))]


def injected_layers(options: DFlashTrainOptions, target_model: torch.nn.Module) -> tuple[int, ...]:
    """The 0-based target layers the drafter reads (z-lab's spacing unless ``target_layers``)."""
    total = int(text_config(target_model.config).num_hidden_layers)
    layers = tuple(options.target_layers or default_target_layers(total, options.layers))
    if any(not -1 <= layer < total for layer in layers):
        raise DraftcountError(f"target_layers {list(layers)} are not all in -1..{total - 1}")
    return layers


def training_source(request: DrafterTrainRequest, options: DFlashTrainOptions, target: LoadedModel) -> FeatureSource:
    """The training batches: the injected layers' states (our 1-based names: layer id + 1) and the last one's."""
    names = [layer + 1 for layer in injected_layers(options, target.model)]
    return feature_source(request, target, list(dict.fromkeys([*names, "last"])), options.seq_len)


def fresh_drafter(options: DFlashTrainOptions, target_model: torch.nn.Module, anchor_predicts: bool = False,
                  draft_vocab: DraftVocab | None = None) -> DFlashDrafter:
    """A new drafter for the target over ``draft_vocab``, shaped by the options."""
    vocab = int(target_model.get_input_embeddings().weight.shape[0])
    layers = injected_layers(options, target_model)
    if options.mask_token_id >= vocab:
        raise DraftcountError(f"mask_token_id {options.mask_token_id} is outside the target's vocabulary ({vocab})")
    mask = None if options.mask_token_id < 0 else options.mask_token_id
    return new_drafter(target_model, options.layers, options.block_size, layers, mask, options.seed,
                       options.intermediate_size, anchor_predicts, options.own_embedding, options.own_lm_head,
                       draft_vocab)


def anchor_generator(batch: dict[str, torch.Tensor], seed: int) -> torch.Generator:
    """The anchors' generator for a batch: seeded by the seed and the batch's tokens, so a step draws the same
    anchors on any machine and after a resume (the batch of a step is fixed by the loop)."""
    # host: the anchors' host draws
    return torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + int(batch["input_ids"].sum()))


def train_dflash(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) a DFlash drafter and save it to ``request.out``."""
    options = parse_options(DFlashTrainOptions, request.options, "dflash training")
    request = budgeted(request, options)
    target = frozen_target(request)
    source = training_source(request, options, target)
    drafter = fresh_drafter(options, target.model, False,
                            choose_draft_vocab(options.draft_vocab, source, target)).to(target.device)
    embed, lm_head = target.model.get_input_embeddings(), target.model.get_output_embeddings()
    batch_loss = lambda batch: dflash_loss(drafter, embed, lm_head, batch, options)  # noqa: E731
    return train_drafter(request, options, target, source,
                         lambda: Fitted(drafter, fit_drafter(drafter, batch_loss, source, target, request, options)),
                         lambda module, batch: block_agreement(module, embed, lm_head, batch), save_drafter)

