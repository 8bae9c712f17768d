"""Data-parallel training: which process this is, which micro-batches of a step it draws, and the collectives
the training loop needs (each a no-op in a single process).

``torchrun --nproc_per_node N`` starts N processes and sets WORLD_SIZE, RANK and LOCAL_RANK; without them there
is one process. A step's global batch is ``grad_accum * world size`` micro-batches; process ``rank`` draws
micro-batches ``rank * grad_accum .. rank * grad_accum + grad_accum - 1`` of it (``Shard``), so any split of
the same global batch over processes and accumulation gives the same step, up to float rounding. Gradients are
summed over processes by hand after the accumulation (every micro-batch's loss is scaled by 1 / micro-batches),
which keeps the loop free of DDP wrappers: a drafter's loss calls its module several times per micro-batch.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from harness.errors import DraftcountError


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world() -> World:
    """This process's place among the processes torchrun started (rank 0 of 1 without torchrun)."""
    values = {}
    for name, default in (("WORLD_SIZE", 1), ("RANK", 0), ("LOCAL_RANK", 0)):
        text = os.environ.get(name, "").strip()
        try:
            values[name] = int(text) if text else default
        except ValueError:
            raise DraftcountError(f"environment variable {name} must be an integer, got {text!r}") from None
    size, rank = values["WORLD_SIZE"], values["RANK"]
    if size < 1 or not 0 <= rank < size:
        raise DraftcountError(f"RANK {rank} is not a process of WORLD_SIZE {size}")
    return World(rank=rank, size=size, local_rank=values["LOCAL_RANK"])


def is_main() -> bool:
    """Whether this process writes (checkpoints, progress, metrics, the trained model): rank 0, or the only one."""
    return world().is_main


@dataclass(frozen=True)
class Shard:
    """Micro-batch ``index`` of the ``count`` that make up a step's global batch."""

    index: int = 0
    count: int = 1

    def rows(self, batch_size: int) -> slice:
        """Its rows of the global batch of ``batch_size * count`` rows."""
        return slice(self.index * batch_size, (self.index + 1) * batch_size)


def step_shards(place: World, grad_accum: int) -> list[Shard]:
    """The micro-batches this process draws, in order, for each optimizer step."""
    count = grad_accum * place.size
    return [Shard(place.rank * grad_accum + index, count) for index in range(grad_accum)]


def local_device(device: str) -> str:
    """Under torchrun, ``cuda`` is this process's GPU, ``cuda:LOCAL_RANK``."""
    place = world()
    if place.size == 1 or not device.startswith("cuda"):
        return device
    if device != "cuda":
        raise DraftcountError(f"with {place.size} processes pass --device cuda (each takes GPU LOCAL_RANK), "
                              f"not --device {device}")
    return f"cuda:{place.local_rank}"


def _active() -> bool:
    return dist.is_available() and dist.is_initialized()


def init(device_type: str) -> None:
    """Join the processes torchrun started (nccl for CUDA, gloo on CPU); nothing in a single process or when
    already joined."""
    place = world()
    if place.size == 1 or _active():
        return
    if not dist.is_available():
        raise DraftcountError("this torch build has no torch.distributed: train in a single process")
    if device_type == "cuda":
        torch.cuda.set_device(place.local_rank)
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    atexit.register(_leave)  # a process that fails leaves without waiting for the others


def _leave() -> None:
    if _active():
        dist.destroy_process_group()


def shutdown() -> None:
    """Wait for every process, then leave the process group (nothing if none was joined)."""
    if _active():
        dist.barrier()
        dist.destroy_process_group()


def _collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def sum_over_processes(tensors: Iterable[torch.Tensor]) -> None:
    """All-reduce (sum) each tensor in place."""
    if _active():
        for tensor in tensors:
            dist.all_reduce(tensor)


def sum_gradients(parameters: list[torch.nn.Parameter]) -> None:
    """Sum each parameter's gradient over the processes (a missing gradient counts as zeros, so that every
    process makes the same collectives)."""
    if not _active():
        return
    for parameter in parameters:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
    sum_over_processes(parameter.grad for parameter in parameters)


def agree_max(value: float) -> float:
    """The largest of every process's ``value`` (e.g. elapsed time, so that all stop at the same step)."""
    if not _active():
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return float(tensor.item())


def same_everywhere(value: float) -> bool:
    """Whether every process holds the same ``value``."""
    highest, lowest = agree_max(value), -agree_max(-value)  # both collectives on every process
    return highest == lowest == value


def broadcast_parameters(parameters: list[torch.nn.Parameter]) -> None:
    """Give every process rank 0's values of ``parameters``."""
    if _active():
        with torch.no_grad():
            for parameter in parameters:
                dist.broadcast(parameter.data, src=0)
