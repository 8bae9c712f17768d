"""Training a Lyanna drafter: ``python -m harness train --method lyanna --target T --data D --out DIR``.

Unrolled K-step hidden-state autoregression, as at inference: step 0 feeds the
backbone the target's true features; step k feeds it its own outputs of step
k-1, with the attention mask of drafting k positions ahead of the true prefix
(``unrolled_step_bias``). At every step the output at position p, injected
with its parent token x_{p+1}, is trained by soft cross-entropy against the
target's distribution softmax(lm_head(f_{p+1})) (restricted to the kept
vocabulary), weighted by ``step_decay``**k, plus optional smooth-L1 regression
of the state onto f_{p+1}. Same data, loop and checkpoints as the EAGLE head.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from harness.training.drafters import (
    DrafterLoopOptions, DrafterTrainRequest, drafter_provenance, feature_source, fit_drafter, frozen_target,
    heldout_batch, shift_right, unrolled_forward,
)
from harness.training.objectives import token_loss
from harness.training.features import FeatureSource, layer_key
from harness.data.token_streams import load_tokens
from harness.options import parse_options
from harness.training.zoo import save_directory
from harness.training.features import choose_features
from methods.lyanna.model import LyannaArch, LyannaModel, new_drafter, save_drafter


@dataclass(frozen=True)
class LyannaTrainOptions(DrafterLoopOptions):
    inject: Literal["token_info", "feature"] = "token_info"
    rank: int = 64
    fusion: Literal["none", "eagle3"] = "none"
    feature_layers: tuple[str, ...] = ()
    intermediate_size: int = 0  # 0 = the target's (or sized by match_eagle)
    match_eagle: bool = False  # size the backbone MLP so the drafter has an EAGLE head's trainable parameters
    vocab_fraction: float = 1.0  # < 1: vocabulary compression to the most frequent tokens
    unroll_steps: int = 5
    step_decay: float = 0.8
    regression_weight: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.vocab_fraction <= 1:
            raise ValueError(f"vocab_fraction must be in (0, 1], got {self.vocab_fraction}")
        if self.unroll_steps < 1:
            raise ValueError(f"unroll_steps must be >= 1, got {self.unroll_steps}")


def eagle_head_parameters(hidden: int, intermediate: int) -> int:
    """Trainable parameters of an EAGLE-1 head of this width: fc (2H -> H, bias) + one decoder layer."""
    return 2 * hidden * hidden + hidden + 4 * hidden * hidden + 3 * hidden * intermediate + hidden


def matched_intermediate(options: LyannaTrainOptions, hidden: int, target_intermediate: int, vocab: int,
                         kept: int) -> int:
    """The backbone MLP width that gives the drafter an EAGLE head's parameter count."""
    budget = eagle_head_parameters(hidden, target_intermediate)
    fixed = hidden * hidden + hidden + 4 * hidden * hidden + 2 * hidden  # proj + attention + norms
    if options.inject == "token_info":
        fixed += vocab * options.rank + options.rank + options.rank * kept
    else:
        fixed += 2 * hidden * hidden + hidden + hidden * hidden + hidden
    return max(8, (budget - fixed) // (3 * hidden))


def frequent_vocabulary(source: FeatureSource, tokens: torch.Tensor | None, vocab: int, fraction: float) -> torch.Tensor:
    """The most frequent ``fraction`` of the vocabulary in the training tokens (sorted ids)."""
    stream = tokens if tokens is not None else torch.cat([shard["input_ids"].flatten().long() for shard in source._shards])
    counts = torch.bincount(stream.flatten().long(), minlength=vocab)
    keep = max(1, round(vocab * fraction))
    return counts.topk(keep).indices.sort().values


def unrolled_states(drafter: LyannaModel, batch: dict[str, torch.Tensor], steps: int) -> list[torch.Tensor]:
    """Backbone outputs (B, T-1, H) of each unrolled step; the output at p predicts f_{p+1}."""
    inputs = drafter.true_inputs([batch[layer_key(layer)][:, :-1] for layer in drafter.arch.features.layers])
    return unrolled_forward(drafter, inputs, lambda out: drafter.own_inputs(shift_right(out)), steps, drafter.config)


def lyanna_loss(drafter: LyannaModel, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
                options: LyannaTrainOptions) -> torch.Tensor:
    following = batch["last"][:, 1:]
    parents = batch["input_ids"][:, 1:]
    with torch.no_grad():
        target_probs = torch.softmax(lm_head(following).float(), dim=-1)[..., drafter.vocab_ids]
    total = following.new_zeros(())
    for step, out in enumerate(unrolled_states(drafter, batch, options.unroll_steps)):
        mask = (torch.arange(out.shape[1], device=out.device) >= step).float()[None].expand(out.shape[0], -1)
        loss = token_loss(options.objective)(drafter.node_logits(out, parents), target_probs, mask)
        if options.regression_weight > 0:
            regression = F.smooth_l1_loss(out, following, reduction="none").mean(-1)
            loss = loss + options.regression_weight * (regression * mask).sum() / mask.sum()
        total = total + options.step_decay**step * loss
    return total


@torch.no_grad()
def depth_agreement(drafter: LyannaModel, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
                    steps: int) -> list[float]:
    """Per depth: how often the drafter's top-1 (parent injected) equals the target's."""
    wanted = lm_head(batch["last"][:, 1:]).argmax(-1)
    parents = batch["input_ids"][:, 1:]
    agreement = []
    for step, out in enumerate(unrolled_states(drafter, batch, steps)):
        chosen = drafter.vocab_ids[drafter.node_logits(out, parents).argmax(-1)]
        agreement.append(float((chosen == wanted)[:, step:].float().mean()))
    return agreement


def train_lyanna(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) a Lyanna drafter and save it to ``request.out``."""
    options = parse_options(LyannaTrainOptions, request.options, "lyanna training")
    target = frozen_target(request)
    layers = choose_features(options.fusion, options.feature_layers, target.config.num_hidden_layers).layers
    source = feature_source(request, target, list(dict.fromkeys([*layers, "last"])), options.seq_len)
    vocab = target.vocab_size
    vocab_ids = None
    if options.vocab_fraction < 1:
        vocab_ids = frequent_vocabulary(source, source.tokens, vocab, options.vocab_fraction)
    kept = vocab if vocab_ids is None else int(vocab_ids.shape[0])
    intermediate = options.intermediate_size
    if options.match_eagle:
        intermediate = matched_intermediate(options, target.config.hidden_size, target.config.intermediate_size,
                                            vocab, kept)
    arch = LyannaArch(options.inject, options.rank, options.fusion, layers, intermediate)
    drafter = new_drafter(target.model, arch, vocab_ids, options.seed).to(target.device)
    lm_head = target.model.get_output_embeddings()
    result = fit_drafter(drafter, lambda batch: lyanna_loss(drafter, lm_head, batch, options), source, target, request,
                         options)
    metrics = {"method": "lyanna", "trainable_parameters": drafter.trainable_parameters(),
               "eagle_head_parameters": eagle_head_parameters(target.config.hidden_size, target.config.intermediate_size),
               "backbone_intermediate_size": drafter.config.intermediate_size, "kept_vocabulary": kept,
               "options": asdict(options), "train": result.as_dict(), "target": request.target,
               "data": str(request.data)}
    if request.heldout is not None:
        heldout = load_tokens(request.heldout)
        if vocab_ids is not None:
            metrics["heldout_vocabulary_coverage"] = float(torch.isin(heldout, vocab_ids).float().mean())
        batch = heldout_batch(heldout, target, list(dict.fromkeys([*layers, "last"])), options.seq_len)
        metrics["heldout_top1_agreement_by_depth"] = depth_agreement(drafter, lm_head, batch, options.unroll_steps)
    provenance = drafter_provenance(request, result)
    save_directory(request.out, lambda path: save_drafter(drafter.cpu(), path, provenance))
    return metrics
