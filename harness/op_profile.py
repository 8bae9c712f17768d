"""Where a generation's host time goes, op by op: two generations profiled and compared per token.

A decoding step of a small model on a GPU is bound by the host: launching kernels, PyTorch's dispatcher,
the CUDA runtime's calls (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``cudaHostAlloc``...). When one decoding
loop is slower than another on the same model, the ops one of them calls more often, or that take longer
in it, say why. ``profile_ops`` runs one generation under ``torch.profiler`` (the CUDA activity too on a
CUDA device, so the runtime's calls and the kernels' device time are listed); ``compare_per_token`` lines two
profiles up per generated token, largest host-time difference first.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ALL_OPS = "(all)"


@dataclass(frozen=True)
class OpCost:
    """One op's (or CUDA runtime call's, or kernel's) total over a profiled run."""

    calls: int
    self_cpu_us: float  # host time spent in the op itself, not in the ops it called
    self_device_us: float  # device time of the kernels it names (0 on the CPU and for host-side ops)


def profile_ops(run: Callable[[], object], device: torch.device) -> dict[str, OpCost]:
    """Run ``run()`` once under the profiler; every op's calls, self host time and self device time (µs)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    costs = {}
    for event in profiler.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:  # older PyTorch names it after CUDA
            device_us = getattr(event, "self_cuda_time_total", 0.0)
        costs[event.key] = OpCost(int(event.count), float(event.self_cpu_time_total), float(device_us))
    return costs


def total_cost(costs: dict[str, OpCost]) -> OpCost:
    return OpCost(sum(cost.calls for cost in costs.values()), sum(cost.self_cpu_us for cost in costs.values()),
                  sum(cost.self_device_us for cost in costs.values()))


def compare_per_token(ours: dict[str, OpCost], theirs: dict[str, OpCost], ours_tokens: int,
                      theirs_tokens: int) -> list[dict[str, float | str]]:
    """One row per op of either profile, per generated token: calls, self host µs and self device µs of each,
    and the host-time difference (ours - theirs); the totals first (``ALL_OPS``), then the largest
    differences in host time."""
    if ours_tokens < 1 or theirs_tokens < 1:
        raise ValueError(f"both runs must generate tokens (got {ours_tokens} and {theirs_tokens})")
    empty = OpCost(0, 0.0, 0.0)

    def row(name: str, mine: OpCost, other: OpCost) -> dict[str, float | str]:
        return {
            "op": name,
            "ours_calls": mine.calls / ours_tokens, "generate_calls": other.calls / theirs_tokens,
            "ours_self_cpu_us": mine.self_cpu_us / ours_tokens,
            "generate_self_cpu_us": other.self_cpu_us / theirs_tokens,
            "ours_self_device_us": mine.self_device_us / ours_tokens,
            "generate_self_device_us": other.self_device_us / theirs_tokens,
            "self_cpu_us_difference": mine.self_cpu_us / ours_tokens - other.self_cpu_us / theirs_tokens,
        }

    rows = [row(name, ours.get(name, empty), theirs.get(name, empty)) for name in sorted(set(ours) | set(theirs))]
    rows.sort(key=lambda item: -abs(float(item["self_cpu_us_difference"])))
    return [row(ALL_OPS, total_cost(ours), total_cost(theirs)), *rows]


def write_rows(rows: list[dict[str, float | str]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({key: f"{value:.3f}" if isinstance(value, float) else value for key, value in row.items()}
                         for row in rows)


def format_rows(rows: list[dict[str, float | str]], limit: int) -> str:
    """The totals and the ``limit`` largest differences as a fixed-width table."""
    lines = [f"{'op (per generated token)':44s} {'calls ours':>10s} {'generate':>9s} {'host us ours':>12s} "
             f"{'generate':>9s} {'difference':>10s} {'device us ours':>14s} {'generate':>9s}"]
    for row in rows[: limit + 1]:
        lines.append(f"{str(row['op'])[:44]:44s} {row['ours_calls']:10.1f} {row['generate_calls']:9.1f} "
                     f"{row['ours_self_cpu_us']:12.1f} {row['generate_self_cpu_us']:9.1f} "
                     f"{row['self_cpu_us_difference']:10.1f} {row['ours_self_device_us']:14.1f} "
                     f"{row['generate_self_device_us']:9.1f}")
    return "\n".join(lines)
