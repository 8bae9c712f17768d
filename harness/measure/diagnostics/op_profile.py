"""Where a generation's host time goes, op by op: two generations profiled and compared per token.

A decoding step of a small model on a GPU is bound by the host: launching kernels, PyTorch's dispatcher,
the CUDA runtime's calls (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``cudaHostAlloc``...). When one decoding
loop is slower than another on the same model, the ops one of them calls more often, or that take longer
in it, say why. ``profile_ops`` runs one generation under ``torch.profiler`` (the CUDA activity too on a
CUDA device, so the runtime's calls and the kernels' device time are listed); ``compare_per_token`` lines two
profiles up per generated token, largest host-time difference first, after the wall time, the time in all
host-side ops and the time outside them (plain Python between ops, which no op's row holds).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from harness.backend.device import Stopwatch

WALL, HOST_OPS, OUTSIDE_OPS = "(wall)", "(all host ops)", "(outside ops)"
SUMMARY_ROWS = (WALL, HOST_OPS, OUTSIDE_OPS)  # first in a comparison, see ``summary_costs``


@dataclass(frozen=True)
class OpCost:
    """One op's (or CUDA runtime call's, or kernel's) total over a profiled run."""

    calls: int
    self_cpu_us: float  # host time spent in the op itself, not in the ops it called
    self_device_us: float  # device time of the kernels it names (0 on the CPU and for host-side ops)
    on_device: bool = False  # a kernel or device copy: its time is also credited to the op that launched it


@dataclass(frozen=True)
class RunProfile:
    ops: dict[str, OpCost]
    wall_us: float  # the profiled run's wall time, the profiler's own overhead included


def profile_ops(run: Callable[[], object], device: torch.device) -> RunProfile:
    """Run ``run()`` once under the profiler: every op's calls, self host time and self device time (µs), and
    the run's wall time."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        watch = Stopwatch(device)
        run()
        wall_us = watch.elapsed() * 1e6
    ops = {}
    for event in profiler.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:  # older PyTorch names it after CUDA
            device_us = getattr(event, "self_cuda_time_total", 0.0)
        on_device = getattr(event, "device_type", DeviceType.CPU) != DeviceType.CPU
        ops[event.key] = OpCost(int(event.count), float(event.self_cpu_time_total), float(device_us), on_device)
    return RunProfile(ops, wall_us)


def summary_costs(profile: RunProfile) -> dict[str, OpCost]:
    """The run's wall time; every host-side op and runtime call together (their calls and self host time; the
    device time of the kernels, each counted once); and the wall time outside them (Python, mostly)."""
    host = [cost for cost in profile.ops.values() if not cost.on_device]
    host_us = sum(cost.self_cpu_us for cost in host)
    device_us = sum(cost.self_device_us for cost in profile.ops.values() if cost.on_device)
    return {WALL: OpCost(0, profile.wall_us, 0.0), HOST_OPS: OpCost(sum(cost.calls for cost in host), host_us,
                                                                     device_us),
            OUTSIDE_OPS: OpCost(0, profile.wall_us - host_us, 0.0)}


def compare_per_token(ours: RunProfile, theirs: RunProfile, ours_tokens: int,
                      theirs_tokens: int) -> list[dict[str, float | str]]:
    """One row per op of either profile, per generated token: calls, self host µs and self device µs of each,
    and the host-time difference (ours - theirs); first the summary rows (``summary_costs``), then the ops,
    largest difference in host time first."""
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

    rows = [row(name, ours.ops.get(name, empty), theirs.ops.get(name, empty))
            for name in sorted(set(ours.ops) | set(theirs.ops))]
    rows.sort(key=lambda item: -abs(float(item["self_cpu_us_difference"])))
    mine, other = summary_costs(ours), summary_costs(theirs)
    return [*(row(name, mine[name], other[name]) for name in mine), *rows]


def write_rows(rows: list[dict[str, float | str]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({key: f"{value:.3f}" if isinstance(value, float) else value for key, value in row.items()}
                         for row in rows)


def format_rows(rows: list[dict[str, float | str]], limit: int) -> str:
    """The summary rows and the ``limit`` largest differences as a fixed-width table."""
    lines = [f"{'op (per generated token)':44s} {'calls ours':>10s} {'generate':>9s} {'host us ours':>12s} "
             f"{'generate':>9s} {'difference':>10s} {'device us ours':>14s} {'generate':>9s}"]
    for row in rows[: len(SUMMARY_ROWS) + limit]:
        lines.append(f"{str(row['op'])[:44]:44s} {row['ours_calls']:10.1f} {row['generate_calls']:9.1f} "
                     f"{row['ours_self_cpu_us']:12.1f} {row['generate_self_cpu_us']:9.1f} "
                     f"{row['self_cpu_us_difference']:10.1f} {row['ours_self_device_us']:14.1f} "
                     f"{row['generate_self_device_us']:9.1f}")
    return "\n".join(lines)
