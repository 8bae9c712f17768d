"""One distillation step for the LMs distilled from the target (the zoo's draft LM, polybasic's mid LM): KL(target
|| student) on windows of a token stream through the whole target, or on rows of the target's feature dump, whose
final states (layer 'last', the LM head's input) give the target's logits through its LM head alone.

The dump's way costs one matmul a position instead of a target forward (the dump's forward ran once, for every
drafter): the same logits to the dump's float16 rounding, on the dump's windows (drawn with the step's generator,
as a token stream's are)."""

from __future__ import annotations

import torch
from transformers import LlamaForCausalLM

from harness.data.token_streams import random_windows
from harness.training.features import FeatureSource
from harness.training.loop import batches_from_step
from harness.training.zoo import distillation_loss, kl_to_teacher


def dump_distillation_loss(student: LlamaForCausalLM, target: LlamaForCausalLM, batch: dict[str, torch.Tensor],
                           temperature: float = 1.0) -> torch.Tensor:
    """``distillation_loss`` with the target's logits from a dump batch's 'last' states through its LM head."""
    with torch.no_grad():
        head = target.get_output_embeddings()
        teacher = head(batch["last"].to(head.weight.dtype))
    return kl_to_teacher(teacher, student(input_ids=batch["input_ids"]).logits, temperature)


def distillation_step_loss(student: LlamaForCausalLM, target: LlamaForCausalLM, data: torch.Tensor | FeatureSource,
                           step: int, seed: int, batch_size: int, seq_len: int, temperature: float,
                           device: torch.device | str) -> tuple[torch.Tensor, int]:
    """Step ``step``'s loss and supervised positions: ``batch_size`` windows of ``seq_len`` drawn from (seed, step)
    out of a token stream (the target runs on them) or a feature dump (``FeatureSource`` with layer 'last')."""
    if isinstance(data, FeatureSource):
        batch = batches_from_step(step, seed, lambda generator: data.batch(batch_size, generator))
        batch = {key: value.to(device) for key, value in batch.items()}
        return dump_distillation_loss(student, target, batch, temperature), batch["input_ids"].numel()
    windows = batches_from_step(step, seed, lambda generator: random_windows(data, batch_size, seq_len, generator))
    windows = windows.to(device)
    return distillation_loss(student, target, windows, temperature), windows.numel()
