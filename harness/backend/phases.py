"""Where a generation's time goes: one clock that splits the wall time into phases.

Phases (``PHASES``): ``prefill`` (the target's forward over the prompt), ``target`` (the target's verify
forwards), ``drafter`` (the drafter's forwards and its logits), ``verify`` (verification and sampling: the
verifier's walk over the tree, the first token's sampling) and ``host``: everything else, on the host or not
(tree building, bookkeeping, cache edits, copies, the adapter's own logic). ``host`` is the wall time minus the
named phases, so the phases add up to the generation's wall time exactly.

Phases nest: time inside an inner phase counts for the inner one only (a drafter forward inside a method's
commit is ``drafter``; the rest of the commit is ``host``).

On CPU the clock reads ``perf_counter`` at every phase boundary (CPU work is synchronous, so nothing waits).
On CUDA it records a CUDA event on the current stream at every boundary and reads them all once, after the
generation's own end-of-timing synchronisation (``finish``): no host synchronisation is added, and a phase's
time is the device time between its events (device idle time while the host prepares the next launch falls
into the phase it interrupts, as a profiler's timeline shows it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from harness.store.records import PHASES

TIMED_PHASES = PHASES[:-1]  # ``host`` is what is left


class PhaseClock:
    """Accumulates seconds per phase of one generation (see the module docstring)."""

    _spare_events: dict[int, list] = {}  # per GPU: events of finished generations, reused (making one per boundary
    # cost a tenth of an autoregressive step's host time on an H200)

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.device_index = torch.cuda.current_device() if self.cuda and self.device.index is None else self.device.index
        self.stack: list[str] = ["host"]
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.marks: list[tuple[str, torch.cuda.Event]] = []  # CUDA: (phase of the segment ending here, event)
        self.last = self._stamp()
        if self.cuda:
            self.marks.append(("", self.last))

    def _stamp(self):
        if not self.cuda:
            return time.perf_counter()
        spare = self._spare_events.setdefault(self.device_index, [])
        event = spare.pop() if spare else torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device_index))
        return event

    def _close_segment(self) -> None:
        """End the running segment (it belongs to the innermost open phase) and start the next."""
        now = self._stamp()
        if self.cuda:
            self.marks.append((self.stack[-1], now))
        else:
            self.seconds[self.stack[-1]] += now - self.last
        self.last = now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in TIMED_PHASES:
            raise ValueError(f"unknown phase {name!r}; phases: {', '.join(TIMED_PHASES)}")
        if self.stack[-1] == name:  # already inside it: nothing to split
            yield
            return
        self._close_segment()
        self.stack.append(name)
        try:
            yield
        finally:
            self._close_segment()
            self.stack.pop()

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """A named part of the host's work (``tree``: the adapter's drafting outside its forwards). The timing
        clock books it as ``host``; a counting clock (``harness.measure.diagnostics.dispatch``) attributes work to
        it."""
        yield

    def pause(self) -> None:
        """Stop the clock (host-only devices): the time until ``resume`` counts for no phase."""
        if self.cuda:
            raise ValueError("a CUDA phase clock cannot be paused")
        self._close_segment()

    def resume(self) -> None:
        self.last = self._stamp()

    def finish(self, wall_seconds: float) -> dict[str, float]:
        """Seconds per phase, ``host`` = ``wall_seconds`` minus the others. On CUDA, call it after the
        generation's timer has synchronised (every event recorded so far has then completed)."""
        if self.cuda:
            for (_, start), (phase, end) in zip(self.marks, self.marks[1:]):
                self.seconds[phase] += start.elapsed_time(end) / 1e3
            self._spare_events.setdefault(self.device_index, []).extend(event for _, event in self.marks[:-1])
            self.marks = self.marks[-1:]
        timed = {name: self.seconds[name] for name in TIMED_PHASES}
        return {**timed, "host": max(wall_seconds - sum(timed.values()), 0.0)}


class NoClock(PhaseClock):
    """The clock of counters nobody times (a measurement's own, a shadow expert's): phases cost nothing."""

    def __init__(self) -> None:  # no device, no marks
        pass

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        yield


NO_CLOCK = NoClock()
