"""One drafting model of the polybasic chain (the mid LM or the small draft LM) with its own KV cache.

A stage feeds tokens at the positions after what its cache holds, crops its cache back to a prefix when tokens
are rejected (by the mid model in the inner loop or by the target), and books every fed position's FLOPs
(``DrafterWork``, one unit per sequence position) until it is known whether that position's KV entry survives
into the accepted sequence: useful if it does, wasted if it is cropped. It also counts its own forwards and
seconds, so the cost rule (``methods.polybasic.view``) can read each stage's latency from the run itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers.cache_utils import Cache

from harness.backend.cuda_graphs import GraphedForwards
from harness.backend.forward import positions, run_model
from harness.backend.kv_cache import crop_cache, new_cache
from harness.backend.models import LoadedModel
from harness.engine.adapter import StepContext
from harness.engine.counters import DrafterWork, GenerationCounters
from harness.verify.sampling import align_vocab


class StageTimer:
    """Seconds spent in ``timing`` blocks: perf_counter on the host (its forwards are synchronous); on CUDA a
    pair of events per block, read by ``take`` once the host has synchronised (every verification reads its
    verdict on the host, so no synchronisation is added)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.seconds = 0.0
        self.pending: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextmanager
    def timing(self) -> Iterator[None]:
        if not self.cuda:
            started = time.perf_counter()
            yield
            self.seconds += time.perf_counter() - started
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(torch.cuda.current_stream(self.device))
        yield
        end.record(torch.cuda.current_stream(self.device))
        self.pending.append((start, end))

    def take(self) -> float:
        """The seconds timed since the last ``take``."""
        seconds = self.seconds + sum(start.elapsed_time(end) / 1e3 for start, end in self.pending)
        self.seconds, self.pending = 0.0, []
        return seconds


class Stage:
    """A model of the chain, its KV cache and its bookkeeping (see the module docstring)."""

    def __init__(self, name: str, lm: LoadedModel) -> None:
        self.name = name
        self.lm = lm
        self.cache: Cache = new_cache(lm.config)
        self.graphs: GraphedForwards | None = None  # cuda_graphs=on: each forward replayed from a graph of its shape
        self.cached_len = 0
        self.work = DrafterWork()
        self.timer = StageTimer(lm.device)
        self.forwards = 0
        self.flops = 0.0

    def begin(self, ctx: StepContext, lookahead: int) -> None:
        """A fresh cache for a new generation (static under ``kv_cache=static``, ``lookahead`` positions past
        the longest sequence)."""
        self.cache = ctx.drafter_cache(self, self.lm.config, lookahead, self.lm.dtype, self.lm.device)
        self.graphs = ctx.drafter_graphs(self, self.lm.config, self.lm.device, self.lm.dtype)
        self.cached_len = 0
        self.work = DrafterWork()
        self.timer.take()
        self.forwards, self.flops = 0, 0.0

    def feed(self, ctx: StepContext, tokens: torch.Tensor, rows: int) -> torch.Tensor:
        """Run ``tokens`` (1, n) at the positions after the cache; the logits (``rows``, target vocabulary) of
        the last ``rows`` of them."""
        count = tokens.shape[-1]
        with self.timer.timing():
            out = run_model(self.lm, tokens.to(self.lm.device), self.cache,
                            positions(self.cached_len, count, self.lm.device), ctx.counters.drafter,
                            logits_to_keep=rows, graphs=self.graphs)
        self.book(self.cached_len, count, out.flops)
        self.cached_len += count
        return align_vocab(out.logits[0, -rows:], ctx.target_vocab_size)

    def book(self, past: int, count: int, flops: float) -> None:
        """One forward of ``count`` positions after ``past`` in the stage's counters and its useful-work ledger (the
        drafter's tally books it where it runs: ``run_model``, or ``count_forward`` for a graphed block's)."""
        self.work.charge(list(range(past, past + count)), flops)
        self.forwards += 1
        self.flops += flops

    def crop(self, length: int) -> None:
        """Keep the cache's first ``length`` positions; the FLOPs of the dropped ones are wasted."""
        if length >= self.cached_len:
            return
        crop_cache(self.cache, length)
        self.cached_len = length
        self.work.flops = {position: flops for position, flops in self.work.flops.items() if position < length}

    def settle(self, counters: GenerationCounters, accepted_len: int) -> None:
        """After the target's verdict: crop to the ``accepted_len`` accepted positions, count what is left as
        useful (its KV entries are part of the accepted sequence), and add this step's stage counters."""
        self.crop(accepted_len)
        useful = sum(self.work.flops.values())
        self.work.settle(counters, list(self.work.flops))
        counters.add_extra(f"polybasic_{self.name}_useful_flops", useful)
        counters.add_extra(f"polybasic_{self.name}_flops", self.flops)
        counters.add_extra(f"polybasic_{self.name}_forwards", self.forwards)
        counters.add_extra(f"polybasic_{self.name}_seconds", self.timer.take())
        self.forwards, self.flops = 0, 0.0
