"""Wall-clock timing of generations: CUDA events on a GPU, perf_counter elsewhere.

On a CUDA device a Stopwatch records an event at its start and one at every
reading, and waits for the latter (the one host synchronisation per reading);
the elapsed time is measured by the GPU between the two events."""

from __future__ import annotations

import time

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timer_name(device: torch.device) -> str:
    """The timer a Stopwatch on ``device`` uses (recorded in every result record)."""
    return "cuda_event" if device.type == "cuda" else "perf_counter"


class Stopwatch:
    """Seconds since start: CUDA events on a CUDA device, perf_counter (after synchronising) otherwise."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        synchronize(device)
        if device.type == "cuda":
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.start_event.record(torch.cuda.current_stream(device))  # the model's GPU, current or not
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        if self.device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record(torch.cuda.current_stream(self.device))
            end.synchronize()
            return self.start_event.elapsed_time(end) / 1e3
        synchronize(self.device)
        return time.perf_counter() - self.started
