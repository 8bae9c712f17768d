"""Training-time test: a one-layer drafter unrolled for several draft steps in one forward per step.

Step 0 reads the target's true features; step k reads what step k-1 predicted, over one KV cache that holds every
step's keys, each query seeing the true prefix and its own chain of predicted states (``unrolled_step_bias``). The
EAGLE family's trainers (eagle, lyanna, prism, dream, mtp) share it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DynamicCache, PretrainedConfig


def unrolled_step_bias(length: int, step: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive mask (1, 1, length, (step + 1) * length) for step ``step`` of unrolled training.

    Step 0 is ordinary causal attention over true features. At step k the query
    at position p stands for drafting k positions ahead of the true prefix: it
    sees the true keys of positions <= p - k and, from each step i = 1..k, the
    key at position p - k + i (its own chain of predicted states, itself last).
    """
    minimum = torch.finfo(dtype).min
    query = torch.arange(length, device=device)[:, None]
    key = torch.arange(length, device=device)[None, :]
    blocks = [torch.where(key <= query - step, 0.0, minimum)]
    for index in range(1, step + 1):
        blocks.append(torch.where(key == query - step + index, 0.0, minimum))
    return torch.cat(blocks, dim=1).to(device, dtype)[None, None]


def unrolled_step_mask(outputs: torch.Tensor, step: int) -> torch.Tensor:
    """(B, T) float mask of the positions unrolled step ``step`` (0-based) is trained on: p >= step, the positions
    that have ``step`` predicted states of their own before them (``unrolled_step_bias``)."""
    keep = (torch.arange(outputs.shape[1], device=outputs.device) >= step).float()
    return keep[None].expand(outputs.shape[0], -1)


def shift_right(states: torch.Tensor) -> torch.Tensor:
    """(B, T, H) -> the same with position p holding position p - 1's row (zeros at p = 0)."""
    return torch.cat([torch.zeros_like(states[:, :1]), states[:, :-1]], dim=1)


def unrolled_forward(step_forward: Callable[..., torch.Tensor], first_inputs: torch.Tensor,
                     feed_back: Callable[[torch.Tensor], torch.Tensor], steps: int,
                     config: PretrainedConfig) -> list[torch.Tensor]:
    """Outputs (B, T, H) of ``steps`` training-time-test steps of a one-layer drafter.

    ``step_forward(inputs, position_ids, cache, bias)`` runs the drafter; step 0
    gets ``first_inputs`` (from true features), step k gets ``feed_back`` of
    step k-1's outputs, with ``unrolled_step_bias`` over the keys of all steps
    so far (one cache holds them). A single step is plain causal attention.
    """
    length = first_inputs.shape[1]
    position_ids = torch.arange(length, device=first_inputs.device)[None].expand(first_inputs.shape[0], -1)
    cache = DynamicCache(config=config) if steps > 1 else None
    inputs, outputs = first_inputs, []
    for step in range(steps):
        bias = unrolled_step_bias(length, step, inputs.dtype, inputs.device) if cache is not None else None
        outputs.append(step_forward(inputs, position_ids, cache, bias))
        inputs = feed_back(outputs[-1])
    return outputs
