"""How a timed forward runs, for the latency measurements and a method's own drafter-step timing (its cost model):
``eager`` (forwards launched from Python on transformers' DynamicCache), ``static`` (the same on a preallocated KV
cache) or ``cuda_graphs`` (replayed from a CUDA graph on that static cache); every time a median of
``harness.backend.device.median_seconds``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import PretrainedConfig
from transformers.cache_utils import Cache

from harness.backend.device import interleaved_median_seconds, median_seconds
from harness.backend.kv_cache import new_cache
from harness.backend.static_cache import new_static_cache

TIMINGS = ("eager", "static", "cuda_graphs")  # how a timed forward runs; see ``timing_cache``


def check_timing(timing: str) -> None:
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {', '.join(TIMINGS)}, not {timing!r}")


def timing_cache(config: PretrainedConfig, capacity: int, dtype: torch.dtype, device: torch.device,
                 timing: str) -> Cache:
    """The KV cache a timed forward runs on: transformers' DynamicCache under ``eager`` (forwards launched from
    Python, the cache grown by concatenation), a preallocated (static) one under ``static`` (the same
    forwards, written in place) and ``cuda_graphs`` (replayed from a CUDA graph): the two steps apart, so
    each one's effect shows on its own."""
    check_timing(timing)
    return new_cache(config) if timing == "eager" else new_static_cache(config, capacity, dtype, device)


def timed_seconds(run: Callable[[], object], device: torch.device, repeats: int, timing: str = "eager") -> float:
    """Median seconds of ``run`` under ``timing`` (its cache is ``timing_cache``'s business)."""
    check_timing(timing)
    return median_seconds(run, device, repeats, graphed=timing == "cuda_graphs")


def timed_seconds_in_turns(runs: dict[Any, Callable[[], object]], device: torch.device, repeats: int,
                           timing: str = "eager") -> dict[Any, float]:
    """Median seconds of each of ``runs`` under ``timing``, timed in turns (``interleaved_median_seconds``);
    under ``cuda_graphs`` one run after another (each its own graph; a GPU is not shared with other work)."""
    check_timing(timing)
    if timing == "cuda_graphs":
        return {key: median_seconds(run, device, repeats, graphed=True) for key, run in runs.items()}
    return interleaved_median_seconds(runs, device, repeats)
