"""Training a PRISM drafter: ``python -m harness train --method prism --target T --data D --out DIR``.

Phase 1 (``phase1_fraction`` of the steps and of the time budget) trains ONE module with EAGLE's loss
(``methods.eagle.training.eagle_loss``: ``ce_weight`` x soft cross-entropy + ``regression_weight`` x smooth-L1 on the
predicted feature, over ``phase1_unroll_steps`` training-time-test steps). Phase 2 copies that module to the M
modules of ``step_modules`` and trains them with module switching and no regression term: ``unroll_steps``
unrolled steps (``harness.training.unroll.unrolled_forward``, one KV cache shared by the steps), step k run by
module f_map(k), each step's cross-entropy weighted by ``step_decay``**(k-1). Both phases run in
``harness.training.drafters.fit_drafter`` (objective, grad_accum, bf16, checkpoints); phase 2 draws its batches
with seed + 1, so it does not repeat phase 1's. With 0 steps the saved drafter is freshly initialised (every module
a copy of one).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch

from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training import distributed
from harness.training.draft_vocab import choose_draft_vocab
from harness.training.drafters import (
    budgeted,
    DrafterLoopOptions, DrafterTrainRequest, Fitted, feature_source, fit_drafter, frozen_target, train_drafter,
)
from harness.training.unroll import shift_right, unrolled_forward, unrolled_step_mask
from harness.training.loop import TrainResult
from harness.training.objectives import token_loss, uses_tree_loss
from methods.eagle.training import EagleTrainOptions, eagle_loss
from methods.prism.head import (
    MAIN_STEP_MODULES, PrismHead, StepModulesHead, check_step_modules, new_prism_head, replicate_module, save_prism,
)


@dataclass(frozen=True)
class PrismTrainOptions(DrafterLoopOptions):
    step_modules: tuple[int, ...] = MAIN_STEP_MODULES  # f_map: 1-based module of draft steps 1, 2, ... (last repeats)
    phase1_fraction: float = 0.5  # share of the steps and of the time budget for phase 1 (one module, EAGLE loss)
    phase1_unroll_steps: int = 1  # training-time-test steps of phase 1 (1: EAGLE-1/2's loss)
    unroll_steps: int = 3  # phase 2's unrolled steps (the paper: 3)
    step_decay: float = 0.8  # weight of unrolled step k: step_decay**(k-1)
    regression_weight: float = 1.0  # phase 1's feature-regression weight (lambda); phase 2 drops the term
    ce_weight: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_step_modules(self.step_modules)
        if uses_tree_loss(self.objective):
            raise DraftcountError(f"prism trains with a token-level objective; {self.objective!r} adds a tree loss "
                                  f"that only the eagle trainer implements")
        if not 0.0 <= self.phase1_fraction <= 1.0:
            raise DraftcountError(f"phase1_fraction must be in [0, 1], got {self.phase1_fraction}")
        if self.phase1_unroll_steps < 1 or self.unroll_steps < 1:
            raise DraftcountError(f"phase1_unroll_steps and unroll_steps must be >= 1, got "
                                  f"{self.phase1_unroll_steps} and {self.unroll_steps}")


def phase1_options(options: PrismTrainOptions) -> EagleTrainOptions:
    """Phase 1's loss options: EAGLE-1/2's loss over ``phase1_unroll_steps`` steps, same training loop."""
    loop = {field.name: getattr(options, field.name) for field in fields(DrafterLoopOptions)}
    return EagleTrainOptions(**loop, fusion="none", feature_layers=("last",), unroll_steps=options.phase1_unroll_steps,
                             step_decay=options.step_decay, regression_weight=options.regression_weight,
                             ce_weight=options.ce_weight)


def switching_outputs(head: StepModulesHead, batch: dict[str, torch.Tensor], steps: int) -> list[torch.Tensor]:
    """Outputs (B, T-1, H) of ``steps`` unrolled steps for pairs (feature p, token p + 1); step k (1-based) runs
    the module ``head.module_index(k)`` picks (PRISM: f_map(k)), all on one KV cache."""
    tokens = batch["input_ids"][:, 1:]
    step_numbers = iter(range(1, steps + 1))

    def step_forward(inputs, position_ids, cache, bias):
        return head(inputs, tokens, position_ids, cache, bias, step=next(step_numbers))

    return unrolled_forward(step_forward, batch["last"][:, :-1], shift_right, steps, head.config)


def unrolled_token_loss(head: StepModulesHead, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor], steps: int,
                        step_decay: float, objective: str, weight: float = 1.0) -> torch.Tensor:
    """The ``objective``'s soft cross-entropy of every unrolled step (``switching_outputs``) against the target's
    next-token distribution, step k weighted ``weight`` x ``step_decay``**(k-1): PRISM's phase 2 and MTP's loss."""
    target_probs = head.draft_vocab.next_token_probs(lm_head, batch["last"][:, 1:])
    total = target_probs.new_zeros(())
    for index, out in enumerate(switching_outputs(head, batch, steps)):
        mask = unrolled_step_mask(out, index)
        loss = weight * token_loss(objective)(head.logits(out, lm_head), target_probs, mask)
        total = total + step_decay**index * loss
    return total


def switching_loss(head: PrismHead, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
                   options: PrismTrainOptions) -> torch.Tensor:
    """Phase 2: soft cross-entropy of every unrolled step against the target's next-token distribution."""
    return unrolled_token_loss(head, lm_head, batch, options.unroll_steps, options.step_decay, options.objective,
                               options.ce_weight)


@torch.no_grad()
def step_agreement(head: StepModulesHead, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
                   steps: int) -> list[float]:
    """Per unrolled step (module f_map(k)): how often the drafter's top-1 equals the target's."""
    wanted = lm_head(batch["last"][:, 1:]).argmax(-1)
    return [float((head.draft_vocab.to_target(head.logits(out, lm_head).argmax(-1)) == wanted)[:, index:]
                  .float().mean())
            for index, out in enumerate(switching_outputs(head, batch, steps))]


def phase_requests(request: DrafterTrainRequest, fraction: float) -> tuple[DrafterTrainRequest, DrafterTrainRequest]:
    """The two phases' step counts, time budgets (phase 2's is fixed once phase 1 is done) and checkpoints."""
    first_steps = round(request.steps * fraction)
    checkpoints = ((None, None) if request.checkpoint is None else
                   tuple(Path(f"{request.checkpoint}.phase{phase}") for phase in (1, 2)))
    first = replace(request, steps=first_steps, time_budget_s=request.time_budget_s * fraction,
                    checkpoint=checkpoints[0])
    second = replace(request, steps=request.steps - first_steps, checkpoint=checkpoints[1])
    return first, second


def remaining_budget(request: DrafterTrainRequest, first: TrainResult) -> float:
    """What phase 1's training loop left of the whole time budget (0 = no limit; a spent budget leaves 1e-9 s,
    which stops phase 2 before its first step)."""
    if request.time_budget_s <= 0:
        return 0.0
    return max(request.time_budget_s - first.seconds, 1e-9)


def train_prism(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) a PRISM drafter in two phases and save it to ``request.out``."""
    options = parse_options(PrismTrainOptions, request.options, "prism training")
    request = budgeted(request, options)
    if distributed.world().size > 1:
        raise DraftcountError("prism trains in a single process (its two phases are two training loops)")
    target = frozen_target(request)
    source = feature_source(request, target, ["last"], options.seq_len)
    lm_head = target.model.get_output_embeddings()

    def fit() -> Fitted:
        first, second = phase_requests(request, options.phase1_fraction)
        vocab = choose_draft_vocab(options.draft_vocab, source, target)
        single = new_prism_head(target.model, (1,), options.seed, vocab).to(target.device)
        loss_options = phase1_options(options)
        result1 = fit_drafter(single, lambda batch: eagle_loss(single, lm_head, batch, loss_options), source, target,
                              first, options)
        head = replicate_module(single, options.step_modules)
        second = replace(second, time_budget_s=remaining_budget(request, result1))
        result2 = fit_drafter(head, lambda batch: switching_loss(head, lm_head, batch, options), source, target,
                              second, replace(options, seed=options.seed + 1))
        return Fitted(head, combined_result(result1, result2), {"step_parameters": head.step_parameters(),
                                                                 "phase1": result1.as_dict(),
                                                                 "phase2": result2.as_dict()})

    return train_drafter(request, options, target, source, fit,
                         lambda module, batch: step_agreement(module, lm_head, batch, options.unroll_steps),
                         save_prism)


def combined_result(first: TrainResult, second: TrainResult) -> TrainResult:
    """Both phases as one training run (steps, seconds, tokens, FLOPs and losses added up; the last phase's final
    loss)."""
    stopped = second.stopped_by if second.steps or not first.steps else first.stopped_by
    return TrainResult(steps=first.steps + second.steps, seconds=first.seconds + second.seconds,
                         tokens=first.tokens + second.tokens,
                         final_loss=second.final_loss if second.steps else first.final_loss,
                         resumed_from_step=first.resumed_from_step, stopped_by=stopped,
                         skipped_steps=first.skipped_steps + second.skipped_steps,
                         losses=[*first.losses, *second.losses], flops=first.flops + second.flops)
