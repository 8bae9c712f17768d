"""Device mechanics: host-to-device copies that do not synchronise, a CUDA side stream, and the one timer.

Copies: a blocking copy of a host tensor to a CUDA device (``t.to(device)``, ``torch.tensor(data, device=...)``)
makes the host wait until every kernel already queued has finished: a host synchronisation in the middle of a
decoding step. Tree masks, position ids and index tensors are small and built on the host from the tree's shape,
so they go through ``to_device``: pinned memory and a non-blocking copy on CUDA (PyTorch's pinned-memory cache
keeps the host buffer alive until the copy has run), a plain copy elsewhere.

Side stream: ``SideStream.launch`` runs a block on a CUDA side stream after everything the main stream has
queued; ``join`` makes the main stream wait for it before the results are used. Tensors crossing between the
streams are marked with ``record_stream`` so the caching allocator does not hand their memory to the other
stream while it may still be read. On other devices the block simply runs inline and ``join`` does nothing, so
the same code path is tested on CPU.

Timing: ``Stopwatch`` times generations (CUDA events on a GPU, one host synchronisation per reading;
perf_counter elsewhere); ``median_seconds`` times repeated calls of one function with the same clocks (a
measurement's latencies). Every timing in the harness goes through these two.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

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


class SideStream:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device) if device.type == "cuda" else None
        self.pending = False

    @contextmanager
    def launch(self, inputs: Iterable[torch.Tensor]) -> Iterator[None]:
        """Run the block on the side stream; ``inputs`` are tensors from the main stream it reads or replaces."""
        if self.stream is None:
            yield
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        for tensor in inputs:
            tensor.record_stream(self.stream)
        with torch.cuda.stream(self.stream):
            yield
        self.pending = True

    def join(self, outputs: Iterable[torch.Tensor]) -> None:
        """Make the main stream wait for the launched work; ``outputs`` are tensors it made that main will use."""
        if not self.pending:
            return
        main = torch.cuda.current_stream(self.device)
        main.wait_stream(self.stream)
        for tensor in outputs:
            tensor.record_stream(main)
        self.pending = False


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timer_name(device: torch.device) -> str:
    """The timer a Stopwatch on ``device`` uses (recorded in every result record)."""
    return "cuda_event" if device.type == "cuda" else "perf_counter"


class Stopwatch:
    """Seconds since start: CUDA events on a CUDA device, perf_counter (after synchronising) otherwise. On a
    host-only device it can be paused (``pause``/``resume``): the time between does not count (step-interleaved
    runs, where two generations take turns step by step)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        synchronize(device)
        if device.type == "cuda":
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.start_event.record(torch.cuda.current_stream(device))  # the model's GPU, current or not
        self.started = time.perf_counter()
        self.paused_seconds = 0.0
        self.paused_at: float | None = None

    def pause(self) -> None:
        if self.device.type == "cuda":
            raise ValueError("a CUDA timing cannot be paused (its events time the device's queue, not this host)")
        self.paused_at = time.perf_counter()

    def resume(self) -> None:
        self.paused_seconds += time.perf_counter() - self.paused_at
        self.paused_at = None

    def elapsed(self) -> float:
        if self.device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record(torch.cuda.current_stream(self.device))
            end.synchronize()
            return self.start_event.elapsed_time(end) / 1e3
        synchronize(self.device)
        return time.perf_counter() - self.started - self.paused_seconds


def replay_of(run: Callable[[], object], device: torch.device, warmup: int) -> Callable[[], object]:
    """``run`` captured in a CUDA graph (after ``warmup`` calls on a side stream); returns its replay. ``run``
    must have fixed shapes and addresses from call to call (a static KV cache rewound to the same length)."""
    main = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        for _ in range(max(1, warmup)):
            run()
    main.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph.replay


def median_seconds(run: Callable[[], object], device: torch.device, repeats: int, warmup: int = 3,
                   graphed: bool = False) -> float:
    """Median wall time of ``run`` over ``repeats`` calls after ``warmup`` untimed ones, each timed by a
    ``Stopwatch`` (CUDA events on a GPU, perf_counter elsewhere). ``graphed``: time replays of ``run`` captured
    in a CUDA graph (``replay_of``), as a serving engine runs it."""
    if graphed:
        if device.type != "cuda":
            raise ValueError(f"graphed timing needs a CUDA device, not {device}")
        run = replay_of(run, device, warmup)
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(repeats):
        watch = Stopwatch(device)
        run()
        samples.append(watch.elapsed())
    return statistics.median(samples)


def interleaved_median_seconds(runs: dict[Any, Callable[[], object]], device: torch.device, repeats: int,
                               warmup: int = 3) -> dict[Any, float]:
    """Median wall time of every run in ``runs``, timed in turns: round r times each run once, so that a slow
    spell of a busy machine falls on every run alike instead of on the ones measured during it (a latency curve
    keeps its shape beside a CPU-bound process)."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    samples: dict[Any, list[float]] = {key: [] for key in runs}
    for _ in range(repeats):
        for key, run in runs.items():
            watch = Stopwatch(device)
            run()
            samples[key].append(watch.elapsed())
    return {key: statistics.median(times) for key, times in samples.items()}
