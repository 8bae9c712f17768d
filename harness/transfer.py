"""Host-to-device copies that do not synchronise.

A blocking copy of a host tensor to a CUDA device (``t.to(device)``,
``torch.tensor(data, device=...)``) makes the host wait until every kernel
already queued has finished: a host synchronisation in the middle of a
decoding step. Tree masks, position ids and index tensors are small and built
on the host from the tree's shape, so they go through ``to_device``: pinned
memory and a non-blocking copy on CUDA (PyTorch's pinned-memory cache keeps
the host buffer alive until the copy has run), a plain copy elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def to_device(host: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``host`` (a CPU tensor) on ``device``, copied without waiting for the device's queued work."""
    device = torch.device(device)
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device, non_blocking=True, copy=True)


def index_on(values: Sequence[int], device: torch.device | str) -> torch.Tensor:
    """A long index tensor of ``values`` on ``device`` (``to_device`` of a host-built tensor)."""
    return to_device(torch.tensor(list(values), dtype=torch.long), device)
