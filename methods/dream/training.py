"""Training a DREAM drafter: ``python -m harness train --method dream --target T --data D --out DIR``.

The loss is DREAM's (their ``dream/train/main_deepspeed.py``): for pairs (f_p, x_{p+1}) the drafter's output is
trained toward f_{p+1} by smooth-L1 regression (``regression_weight``, their v_w) and through the target's LM head by
soft cross-entropy (``ce_weight``, their p_w), as EAGLE's (``methods.eagle.training.unrolled_loss``, over
``unroll_steps`` training-time-test steps; DREAM trains one); and its middle layer's output (after the gated
cross-attention) toward the target's hidden state that DREAM picks per position by attention entropy: among the
outputs of the first ``mid_fraction`` of the target's layers (``methods.dream.attention.mid_candidates``), the one
whose next layer attends with the least entropy there (``mid_weight``, smooth-L1). Features come from the target on
the fly or from a dump (``last`` and the candidate layers; a dump without the candidates, as the default workflow's
holds ``last`` alone, has them computed by the target from each batch's tokens); a dump that holds ``layer0`` (the target's input
embeddings: a vision-language target's dump, ``python -m harness vlm-features``) gives the drafter its inputs as
DREAM trains, an image position's being the image's projected feature.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from harness.backend.models import text_config
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.draft_vocab import choose_draft_vocab
from harness.training.drafters import (
    budgeted,
    DrafterLoopOptions, DrafterTrainRequest, Fitted, feature_source, fit_drafter, frozen_target, train_drafter,
)
from harness.training.unroll import shift_right, unrolled_forward
from harness.training.features import layer_key, target_features
from harness.training.objectives import uses_tree_loss
from methods.dream.attention import attention_candidates, entropy_mid_states, mid_candidates
from methods.dream.checkpoint import save_dream
from methods.dream.head import DreamHead, new_dream_head
from methods.eagle.training import head_agreement, unrolled_loss


@dataclass(frozen=True)
class DreamTrainOptions(DrafterLoopOptions):
    unroll_steps: int = 1  # training-time-test steps (DREAM: 1, as EAGLE-2)
    step_decay: float = 0.8
    regression_weight: float = 1.0  # DREAM's v_w
    ce_weight: float = 0.1  # DREAM's p_w
    mid_weight: float = 1.0  # the middle layer's regression onto the entropy-chosen target layer
    mid_fraction: float = 0.4  # the share of the target's layers the middle layer's target is chosen from

    def __post_init__(self) -> None:
        super().__post_init__()
        if uses_tree_loss(self.objective):
            raise DraftcountError(f"dream trains with a token-level objective; {self.objective!r} adds a tree loss "
                                  f"that only the eagle trainer implements")
        if self.unroll_steps < 1 or not 0.0 < self.mid_fraction <= 1.0:
            raise DraftcountError(f"dream training needs unroll_steps >= 1 and mid_fraction in (0, 1], got "
                                  f"{self.unroll_steps} and {self.mid_fraction}")


def dream_loss(head: DreamHead, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor], mid: torch.Tensor,
               options: DreamTrainOptions) -> torch.Tensor:
    """EAGLE's unrolled loss on the drafter's outputs plus ``mid_weight`` x smooth-L1 of its middle layer (teacher-
    forced step) against ``mid`` (B, T, H), the entropy-chosen target states (slot p: position p + 1's)."""
    tokens = batch["input_ids"][:, 1:]
    embeds = batch["layer0"][:, 1:] if "layer0" in batch else None  # a VLM dump's input embeddings (the image's)
    middles: list[torch.Tensor] = []

    def step_forward(inputs, position_ids, cache, bias):
        out, middle = head(inputs, tokens, position_ids, cache, bias, embeds=embeds, with_mid=True)
        middles.append(middle)
        return out

    outputs = unrolled_forward(step_forward, batch["last"][:, :-1], shift_right, options.unroll_steps, head.config)
    loss = unrolled_loss(head, lm_head, outputs, batch["last"][:, 1:], options.objective, options.ce_weight,
                         options.regression_weight, options.step_decay)
    return loss + options.mid_weight * F.smooth_l1_loss(middles[0], mid[:, 1:])


def dump_layers(data: Path) -> set[str] | None:
    """The layers a feature dump at ``data`` holds, or None when ``data`` is a token stream (features on the fly)."""
    index = data / "index.json"
    return set(json.loads(index.read_text())["layers"]) if data.is_dir() and index.is_file() else None


def train_dream(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) a DREAM drafter and save it to ``request.out``."""
    options = parse_options(DreamTrainOptions, request.options, "dream training")
    request = budgeted(request, options)
    target = frozen_target(request)
    depth = int(text_config(target.config).num_hidden_layers)
    candidates = attention_candidates(target.model, mid_candidates(depth, options.mid_fraction))
    dumped = dump_layers(Path(request.data))
    from_source = dumped is None or {layer_key(index) for index in candidates} <= dumped
    source = feature_source(request, target, ["last", *candidates] if from_source else ["last"], options.seq_len)
    lm_head = target.model.get_output_embeddings()
    head = new_dream_head(target.model, options.seed,
                          choose_draft_vocab(options.draft_vocab, source, target)).to(target.device)

    def batch_loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        states = batch if from_source else target_features(target.model, batch["input_ids"], candidates)
        mid = entropy_mid_states(target.model, {index: states[layer_key(index)] for index in candidates})
        return dream_loss(head, lm_head, batch, mid, options)

    return train_drafter(request, options, target, source,
                         lambda: Fitted(head, fit_drafter(head, batch_loss, source, target, request, options),
                                        {"mid_layers": candidates}),
                         lambda module, batch: head_agreement(module, lm_head, batch, max(2, options.unroll_steps)),
                         save_dream)
