"""One distillation step for the LMs distilled from the target (the zoo's draft LM, polybasic's mid LM): KL(target
|| student), the target's logits its LM head over its final states (layer 'last', the LM head's input) from a
``FeatureSource``: read from the target's feature dump, or computed by the target on windows of a token stream.

From a dump this costs one matmul a position instead of a target forward (the dump's forward ran once, for every
drafter): the same logits to the dump's float16 rounding, on the dump's windows (drawn with the step's generator, as
a token stream's are). From a token stream it is the target's forward, its logits bit for bit."""

from __future__ import annotations

import torch
from transformers import LlamaForCausalLM

from harness.training.features import FeatureSource
from harness.training.loop import batches_from_step
from harness.training.zoo import kl_to_teacher


def head_distillation_loss(student: LlamaForCausalLM, target: LlamaForCausalLM, batch: dict[str, torch.Tensor],
                           temperature: float = 1.0) -> torch.Tensor:
    """KL(target || student) at ``temperature``, the target's logits its LM head over the batch's 'last' states."""
    with torch.no_grad():
        head = target.get_output_embeddings()
        teacher = head(batch["last"].to(head.weight.dtype))
    return kl_to_teacher(teacher, student(input_ids=batch["input_ids"]).logits, temperature)


def distillation_step_loss(student: LlamaForCausalLM, target: LlamaForCausalLM, source: FeatureSource, step: int,
                           seed: int, batch_size: int, temperature: float,
                           device: torch.device | str) -> tuple[torch.Tensor, int]:
    """Step ``step``'s loss and supervised positions: ``batch_size`` windows drawn from (seed, step) out of
    ``source`` (layer 'last': a dump's, or the target's on a token stream)."""
    batch = batches_from_step(step, seed, lambda generator: source.batch(batch_size, generator))
    batch = {key: value.to(device) for key, value in batch.items()}
    return head_distillation_loss(student, target, batch, temperature), batch["input_ids"].numel()
