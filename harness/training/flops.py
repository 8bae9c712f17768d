"""Training FLOPs, counted rather than estimated: torch's ``FlopCounterMode`` over one optimizer step's forwards
and backwards (every micro-batch, a training-time-test unroll's every pass, the target forwards a trainer runs on
the fly), times the steps. Matrix products and attention are counted (elementwise work is not, as in the field's
6 N D convention); causal attention counts as full, as torch's counter has it. The CPU's fused attention kernel,
which torch's table lacks, is added here, so a count on the CPU equals one on a GPU.

The count runs inside training, on its first step: under the counter's dispatch mode that step's gradients round
differently in their last bits (measured: a 5-step run's later losses differ from an uninstrumented loop's at the
7th digit). Deterministic: every run of a commit trains the same models, the reproducibility the workflow promises;
only a loop without the counter would differ."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count


def cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def cpu_attention_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                                 **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


CPU_ATTENTION = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: cpu_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_attention_backward_flops,
}


def flop_counter() -> FlopCounterMode:
    """A counter for one step's work (``with flop_counter() as counter: ...; counter.get_total_flops()``)."""
    return FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION)
