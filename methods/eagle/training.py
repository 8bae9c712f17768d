"""Training an EAGLE head: ``python -m harness train --method eagle --target T --data D --out DIR``.

fusion=none (EAGLE-1/2): the head sees the target's last feature f_p and the
token x_{p+1} and is trained to predict f_{p+1} (smooth-L1 regression) and the
target's next-token distribution softmax(lm_head(f_{p+1})) (soft
cross-entropy). fusion=eagle3 trains the EAGLE-3 head (``methods.eagle.head3``,
the official layout): the features of EAGLE-3's low, middle and high layers are
concatenated and projected by ``fc``, the head drafts through its own norm and
LM head (started from the target's), and the loss is soft cross-entropy alone, over
``unroll_steps`` training-time-test steps: step k feeds the head its own
outputs of step k-1 in place of true features, with the attention mask of
drafting k positions ahead, weighted by ``step_decay``**k. Any fusion may be
unrolled; EAGLE-1/2 use one step.

``init=<drafter dir>`` starts from a trained head (its fusion must match the option); ``objective: gto`` then adds
Group Tree Optimization (``harness.training.gto``) against a frozen copy of it, with the hooks ``EAGLE_GTO``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from harness.training.draft_vocab import DraftVocab, check_init_vocab, choose_draft_vocab
from harness.training.drafters import (
    budgeted,
    DrafterTrainRequest, Fitted, feature_source, fit_drafter, frozen_target, train_drafter,
)
from harness.training.unroll import shift_right, unrolled_forward, unrolled_step_mask
from harness.backend.forward import causal_bias, positions
from harness.backend.kv_cache import new_cache
from harness.backend.models import LoadedModel
from harness.errors import DraftcountError
from harness.training.gto import GtoHooks, GtoTrainOptions, RowTarget, prefix_cache, with_gto
from harness.training.objectives import token_loss
from harness.training.features import FeatureSpec, feature_rows, layer_key
from harness.options import parse_options
from harness.training.features import choose_features
from methods.eagle.adapter import EagleAdapter
from methods.eagle.checkpoint import load_head, save_head
from methods.eagle.head import EagleHead, new_head
from methods.eagle.head3 import Eagle3Head
from methods.eagle.parallel import mask_loss, parallel_agreement


@dataclass(frozen=True)
class EagleTrainOptions(GtoTrainOptions):
    fusion: Literal["none", "eagle3"] = "none"
    feature_layers: tuple[str, ...] = ()  # default: ('last',) for none, a low/middle/high layer for eagle3
    unroll_steps: int = 0  # 0 = 1 for fusion none (EAGLE-1/2), 3 for eagle3
    step_decay: float = 0.8
    regression_weight: float = 1.0  # fusion none only
    ce_weight: float = 0.1
    parallel: int = 0  # P-EAGLE: k > 0 adds mask inputs and trains blocks of k - 1 masks (methods.eagle.parallel)
    anchors: int = 32  # P-EAGLE: mask blocks per window
    parallel_weight: float = 1.0  # P-EAGLE: the masks' token loss beside EAGLE's
    step_residuals: bool = False  # HiViS v2: a learned bias-correction residual per fed-back step (unroll_steps - 1)

    @property
    def steps_unrolled(self) -> int:
        return self.unroll_steps or (3 if self.fusion == "eagle3" else 1)


def unrolled_outputs(head: EagleHead | Eagle3Head, batch: dict[str, torch.Tensor], steps: int) -> list[torch.Tensor]:
    """Head outputs (B, T-1, H) of each unrolled step for pairs (feature p, token p + 1)."""
    tokens = batch["input_ids"][:, 1:]
    features = head.input_features([batch[layer_key(layer)][:, :-1] for layer in head.features.layers])

    step_numbers = iter(range(1, steps + 1))

    def step_forward(inputs, position_ids, cache, bias):
        return head(inputs, tokens, position_ids, cache, bias, **draft_step(head, next(step_numbers)))

    return unrolled_forward(step_forward, features, shift_right, steps, head.config)


def draft_step(head: torch.nn.Module, step: int) -> dict[str, int]:
    """``{"step": step}`` for a head whose forward depends on the draft step (HiViS v2's residuals), else {}."""
    return {"step": step} if getattr(head, "residual_steps", 0) else {}


def eagle_loss(head: EagleHead | Eagle3Head, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
               options: EagleTrainOptions) -> torch.Tensor:
    regression = options.regression_weight if head.features.fusion == "none" else 0.0
    return unrolled_loss(head, lm_head, unrolled_outputs(head, batch, options.steps_unrolled), batch["last"][:, 1:],
                         options.objective, options.ce_weight, regression, options.step_decay)


def unrolled_loss(head: torch.nn.Module, lm_head: torch.nn.Module, outputs: list[torch.Tensor],
                  following: torch.Tensor, objective: str, ce_weight: float, regression_weight: float,
                  step_decay: float) -> torch.Tensor:
    """EAGLE's loss over unrolled steps: step k's outputs (B, T-1, H) against ``following`` (f_{p+1}, what the
    output at p should be): ``ce_weight`` x the objective's token loss against softmax(lm_head(f_{p+1})) plus
    ``regression_weight`` x smooth-L1 on the feature, over the positions step k trains, weighted by step_decay**k.
    Over a draft vocabulary the target's distribution is restricted to it (``harness.training.draft_vocab``)."""
    target_probs = head.draft_vocab.next_token_probs(lm_head, following)
    total = following.new_zeros(())
    for step, out in enumerate(outputs):
        mask = unrolled_step_mask(out, step)
        loss = ce_weight * token_loss(objective)(head.logits(out, lm_head), target_probs, mask)
        if regression_weight > 0:
            regression = F.smooth_l1_loss(out, following, reduction="none").mean(-1)
            loss = loss + regression_weight * (regression * mask).sum() / mask.sum()
        total = total + step_decay**step * loss
    return total


@torch.no_grad()
def head_agreement(head: EagleHead | Eagle3Head, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor], steps: int) -> list[float]:
    """Per unrolled step: how often the head's top-1 equals the target's (teacher-forced prefix)."""
    wanted = lm_head(batch["last"][:, 1:]).argmax(-1)
    agreement = []
    for step, out in enumerate(unrolled_outputs(head, batch, steps)):
        hits = (head.draft_vocab.to_target(head.logits(out, lm_head).argmax(-1)) == wanted)[:, step:]
        agreement.append(float(hits.float().mean()))
    return agreement


# GTO's hooks: the head's catch-up over a row's true features, and a path's log-probability along its own states.

@dataclass
class HeadState:
    """A head after reading a row's pairs (f_p, x_{p+1}): its outputs (1, T-1, H), cache and the target's LM head."""

    outputs: torch.Tensor
    cache: DynamicCache
    lm_head: torch.nn.Module


def head_catch_up(head: EagleHead | Eagle3Head, row: RowTarget) -> HeadState:
    features = head.input_features([state[:, :-1] for state in feature_rows(row.output.hidden_states, head.features)])
    count = features.shape[1]
    cache = new_cache(head.config)
    bias = causal_bias(0, count, features.dtype, features.device)
    outputs = head(features, row.tokens[None, 1:], positions(0, count, features.device), cache, bias)
    return HeadState(outputs, cache, row.target.model.get_output_embeddings())


def head_path_logprob(head: EagleHead | Eagle3Head, state: HeadState, prefix_len: int,
                      tokens: torch.Tensor) -> torch.Tensor:
    """log M(tokens) below root x_{prefix_len}: node j is fed (its parent's output, its token) at position
    prefix_len + j - 1 over the prefix's cache and its ancestors, as the adapter feeds tree frontiers."""
    total = state.outputs.new_zeros((), dtype=torch.float32)
    cache = prefix_cache(state.cache, prefix_len, head.config)
    hidden = state.outputs[0, prefix_len - 1]
    for index, token in enumerate(tokens):
        logits = head.draft_vocab.target_logits(head.logits(hidden, state.lm_head))
        total = total + torch.log_softmax(logits.float(), dim=-1)[token]
        if index + 1 < tokens.shape[0]:
            position = torch.full((1, 1), prefix_len + index, device=hidden.device)
            hidden = head(hidden[None, None], token.reshape(1, 1), position, cache, None,
                          **draft_step(head, index + 2))[0, 0]
    return total


EAGLE_GTO = GtoHooks(adapter=EagleAdapter, catch_up=head_catch_up, path_logprob=head_path_logprob)


def initial_head(options: EagleTrainOptions, target: LoadedModel, spec: FeatureSpec, init: torch.nn.Module | None,
                 vocab: Callable[[], DraftVocab]) -> torch.nn.Module:
    """A fresh head (over the draft vocabulary ``vocab()`` chooses), or ``init``, the trained one the option names
    (in training mode; its fusion must be the option's, and its draft vocabulary stays)."""
    if init is None:
        head = new_head(target.model, spec, options.seed, vocab()).to(target.device)
    else:
        head = init.to(target.device).train()
        if head.features.fusion != options.fusion:
            raise DraftcountError(f"init head {options.init} has fusion {head.features.fusion}; "
                                  f"pass fusion={head.features.fusion}")
        check_init_vocab(options.draft_vocab, head.draft_vocab, options.init)
    if options.step_residuals and not getattr(head, "residual_steps", 0):
        if not isinstance(head, EagleHead) or options.steps_unrolled < 2 or options.parallel:
            raise DraftcountError("eagle training: step_residuals (HiViS v2) needs fusion none, unroll_steps >= 2 "
                                  "and no parallel")
        head.enable_step_residuals(options.steps_unrolled - 1)
    return head


def train_eagle(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) an EAGLE head and save it to ``request.out``; with ``init``,
    fine-tune a trained one (``objective: gto``: by Group Tree Optimization against a frozen copy of it)."""
    options = parse_options(EagleTrainOptions, request.options, "eagle training")
    request = budgeted(request, options)
    target = frozen_target(request)
    init = load_head(Path(options.init), target.model) if options.init else None
    spec = init.features if init is not None else choose_features(options.fusion, options.feature_layers,
                                                                  target.config.num_hidden_layers)
    source = feature_source(request, target, list(dict.fromkeys([*spec.layers, "last"])), options.seq_len)
    head = initial_head(options, target, spec, init, lambda: choose_draft_vocab(options.draft_vocab, source, target))
    lm_head = target.model.get_output_embeddings()
    if options.parallel:
        return train_parallel(request, options, target, head, source, lm_head)
    batch_loss = with_gto(lambda batch: eagle_loss(head, lm_head, batch, options), EAGLE_GTO, head, target, options)
    return train_drafter(request, options, target, source,
                         lambda: Fitted(head, fit_drafter(head, batch_loss, source, target, request, options)),
                         lambda module, batch: head_agreement(module, lm_head, batch, max(2, options.steps_unrolled)),
                         save_head)


def train_parallel(request: DrafterTrainRequest, options: EagleTrainOptions, target: LoadedModel,
                   head: torch.nn.Module, source, lm_head: torch.nn.Module) -> dict:
    """P-EAGLE: EAGLE's loss plus the mask blocks' (``methods.eagle.parallel``), on a head with mask inputs."""
    if not isinstance(head, EagleHead) or options.parallel < 2 or options.objective != "token":
        raise DraftcountError("eagle training: `parallel` (P-EAGLE) needs k >= 2, fusion none and the token "
                              "objective")
    head.enable_parallel()

    def batch_loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        masks = mask_loss(head, lm_head, batch, options.parallel, options.anchors, options.objective, options.seed)
        return eagle_loss(head, lm_head, batch, options) + options.parallel_weight * masks

    return train_drafter(request, options, target, source,
                         lambda: Fitted(head, fit_drafter(head, batch_loss, source, target, request, options)),
                         lambda module, batch: parallel_agreement(module, lm_head, batch, options.parallel),
                         save_head)
