"""Training a DSpark drafter: ``python -m harness train --method dspark --target T --data D --out DIR``.

The backbone trains on masked blocks at random anchors as DFlash's does (``methods.dflash.training``), with every
slot drafting (slot k: x_{a+k+1}). Slot k's logits carry the Markov bias of the true token before it (teacher
forcing, as DeepSpec trains), and are trained towards the target's distribution (the objective's token loss); the
confidence head is trained towards c*_k = 1 - |p_draft - p_target|_1 / 2 (the chance that rejection sampling at
T = 1 accepts the slot) with binary cross-entropy, ``confidence_weight`` beside the token loss; both weighted
exp(-k / gamma) (gamma 4, DeepSpec's).

With ``--heldout`` the confidence temperatures are then fitted slot by slot (STS, the paper's section 3.2.1, by
this rule): T_k from a log-spaced grid minimising the expected calibration error (10 bins) of the predicted prefix
survival c_1 ... c_k against c*_1 ... c*_k over held-out anchors, the earlier slots' T fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from harness.data.token_streams import load_tokens
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.draft_vocab import choose_draft_vocab
from harness.training.drafters import (
    budgeted,
    DrafterTrainRequest, Fitted, fit_drafter, frozen_target, heldout_batch, init_linear_layers, train_drafter,
)
from methods.dflash.training import (
    DFlashTrainOptions, anchor_generator, block_outputs, draw_anchors, evenly_spaced_anchors, fresh_drafter,
    label_positions, slot_weights, target_probs_at, training_source, weighted_token_loss,
)
from methods.dspark.checkpoint import save_dspark
from methods.dspark.model import DSparkDrafter

TEMPERATURE_GRID = torch.logspace(-1.0, 1.0, 41)  # host: candidates, each read as a scalar


@dataclass(frozen=True)
class DSparkTrainOptions(DFlashTrainOptions):
    block_size: int = 7  # DeepSpec's Qwen3-8B drafters: 7
    markov_rank: int = 32  # r (DeepSpec: 256 on a 151k vocabulary)
    confidence_weight: float = 1.0
    loss_gamma: float = 4.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.markov_rank < 0 or self.confidence_weight < 0:
            raise DraftcountError(f"dspark training needs markov_rank >= 0 and confidence_weight >= 0, got "
                                  f"{self.markov_rank} and {self.confidence_weight}")


@dataclass
class SlotOutputs:
    """Per row, anchor and slot: corrected logits (over the draft vocabulary), raw confidence logits, the target's
    distribution (restricted to the draft vocabulary), c* and the target's top-1 (a target id)."""

    logits: torch.Tensor
    confidence: torch.Tensor
    target_probs: torch.Tensor
    survival_target: torch.Tensor
    wanted: torch.Tensor


def slot_outputs(drafter: DSparkDrafter, embed: torch.nn.Module, lm_head: torch.nn.Module,
                 batch: dict[str, torch.Tensor], anchors: torch.Tensor) -> SlotOutputs:
    outputs = drafter.draft_rows(block_outputs(drafter, embed, batch, anchors))
    labels = label_positions(drafter, anchors)
    previous = batch["input_ids"].gather(1, (labels - 1).flatten(1)).view(labels.shape)  # teacher forcing
    logits, confidence = drafter.slot(outputs, drafter.logits(outputs, lm_head), previous)
    full = target_probs_at(lm_head, batch["last"], labels)
    target = drafter.draft_vocab.restrict(full)
    gap = (torch.softmax(logits.float(), dim=-1) - target).abs().sum(-1)
    if drafter.draft_vocab.reduced:  # the target's mass outside the draft vocabulary is never accepted
        gap = gap + (1.0 - target.sum(-1))
    accepted = 1.0 - 0.5 * gap
    return SlotOutputs(logits, confidence, target, accepted.detach().clamp(0.0, 1.0), full.argmax(-1))


def dspark_loss(drafter: DSparkDrafter, embed: torch.nn.Module, lm_head: torch.nn.Module,
                batch: dict[str, torch.Tensor], options: DSparkTrainOptions) -> torch.Tensor:
    tokens = batch["input_ids"]
    anchors = draw_anchors(tokens.shape[0], tokens.shape[1], drafter.block_size, options.anchors,
                           anchor_generator(batch, options.seed)).to(tokens.device)
    out = slot_outputs(drafter, embed, lm_head, batch, anchors)
    weights = slot_weights(out.logits.shape[-2], options.gamma, tokens.device)
    loss = weighted_token_loss(options.objective, out.logits, out.target_probs, weights)
    if drafter.confidence_head is None or options.confidence_weight == 0:
        return loss
    mask = weights.expand(out.confidence.shape)
    bce = F.binary_cross_entropy_with_logits(out.confidence.float(), out.survival_target, reduction="none")
    return loss + options.confidence_weight * (bce * mask).sum() / mask.sum()


def calibration_error(predicted: torch.Tensor, observed: torch.Tensor, bins: int = 10) -> float:
    """Expected calibration error: the mean over equal-width bins of predicted probability of
    |mean predicted - mean observed|, weighted by the bins' shares."""
    index = (predicted * bins).long().clamp(max=bins - 1)
    error = 0.0
    for value in range(bins):
        chosen = index == value
        if chosen.any():
            error += float(chosen.float().mean()) * abs(float(predicted[chosen].mean() - observed[chosen].mean()))
    return error


@torch.no_grad()
def fit_temperatures(drafter: DSparkDrafter, embed: torch.nn.Module, lm_head: torch.nn.Module,
                     batch: dict[str, torch.Tensor]) -> list[float]:
    """STS (see the module docstring): T_k slot by slot on ``batch``'s evenly spaced anchors."""
    out = slot_outputs(drafter, embed, lm_head, batch, evenly_spaced_anchors(batch, drafter.block_size))
    raw = out.confidence.float().flatten(0, 1)  # (anchors, slots)
    observed = torch.cumprod(out.survival_target.flatten(0, 1), dim=-1)
    chosen: list[float] = []
    survival = torch.ones(raw.shape[0], device=raw.device)
    for slot in range(raw.shape[1]):
        errors = [calibration_error(survival * torch.sigmoid(raw[:, slot] / value), observed[:, slot])
                  for value in TEMPERATURE_GRID]
        chosen.append(float(TEMPERATURE_GRID[int(torch.tensor(errors).argmin())]))  # host: Python floats
        survival = survival * torch.sigmoid(raw[:, slot] / chosen[-1])
    return chosen


@torch.no_grad()
def slot_agreement(drafter: DSparkDrafter, embed: torch.nn.Module, lm_head: torch.nn.Module,
                   batch: dict[str, torch.Tensor]) -> list[float]:
    """Per slot: how often the corrected top-1 equals the target's (teacher-forced context and previous token)."""
    out = slot_outputs(drafter, embed, lm_head, batch, evenly_spaced_anchors(batch, drafter.block_size))
    hits = drafter.draft_vocab.to_target(out.logits.argmax(-1)) == out.wanted
    return [float(value) for value in hits.float().mean(dim=(0, 1))]


def train_dspark(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) a DSpark drafter, fit its confidence temperatures on
    ``--heldout`` and save it to ``request.out``."""
    options = parse_options(DSparkTrainOptions, request.options, "dspark training")
    request = budgeted(request, options)
    target = frozen_target(request)
    source = training_source(request, options, target)
    vocab = choose_draft_vocab(options.draft_vocab, source, target)
    base = fresh_drafter(options, target.model, True, vocab)
    config = base.config
    config.markov_rank, config.confidence_head_with_markov = options.markov_rank, True
    torch.manual_seed(options.seed + 1)
    drafter = DSparkDrafter(config, base.target_layer_ids, base.mask_token_id, int(target.config.hidden_size),
                            draft_vocab=vocab)
    init_linear_layers(drafter, std=0.02)
    if drafter.markov_head is not None:  # the bias starts at zero: a fresh DSpark drafts as its backbone does
        torch.nn.init.normal_(drafter.markov_head.markov_w1.weight, std=0.02)
        torch.nn.init.zeros_(drafter.markov_head.markov_w2.weight)
    drafter.load_state_dict(base.state_dict(), strict=False)  # the backbone as a fresh DFlash drafter starts
    drafter = drafter.to(target.device)
    embed, lm_head = target.model.get_input_embeddings(), target.model.get_output_embeddings()

    def fit() -> Fitted:
        result = fit_drafter(drafter, lambda batch: dspark_loss(drafter, embed, lm_head, batch, options), source,
                             target, request, options)
        if request.heldout is None:
            return Fitted(drafter, result)
        held = heldout_batch(load_tokens(request.heldout), target, source.layers, options.seq_len)
        temperatures = fit_temperatures(drafter, embed, lm_head, held)
        drafter.temperatures.copy_(torch.tensor(temperatures, device=drafter.temperatures.device))
        return Fitted(drafter, result, {"confidence_temperatures": temperatures})

    return train_drafter(request, options, target, source, fit,
                         lambda module, batch: slot_agreement(module, embed, lm_head, batch), save_dspark)
