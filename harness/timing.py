"""Wall-clock timing that waits for the device before reading the clock."""

from __future__ import annotations

import time

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timer_name(device: torch.device) -> str:
    return "perf_counter+cuda_synchronize" if device.type == "cuda" else "perf_counter"


class Stopwatch:
    """Seconds since start, with the device synchronised at every reading."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        synchronize(device)
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        synchronize(self.device)
        return time.perf_counter() - self.started
