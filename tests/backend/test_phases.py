"""The phase clock: nested phases split the wall time exactly, the innermost phase gets the time."""

import pytest
import torch

from harness.backend import phases
from harness.backend.phases import NO_CLOCK, PHASES, PhaseClock


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_nested_phases_take_their_own_time_and_host_is_the_rest(monkeypatch):
    clock_time = FakeTime()
    monkeypatch.setattr(phases, "time", clock_time)
    clock = PhaseClock(torch.device("cpu"))
    clock_time.now = 1.0  # host
    with clock.phase("target"):
        clock_time.now = 3.0
    with clock.phase("drafter"):
        clock_time.now = 3.5
        with clock.phase("verify"):  # an inner phase takes its time from the outer one
            clock_time.now = 4.5
        with clock.phase("drafter"):  # the same phase again: nothing to split
            clock_time.now = 5.0
    clock_time.now = 6.0
    seconds = clock.finish(wall_seconds=7.0)
    assert seconds == {"prefill": 0.0, "target": 2.0, "drafter": 1.0, "verify": 1.0, "host": 3.0}
    assert list(seconds) == list(PHASES) and sum(seconds.values()) == pytest.approx(7.0)


def test_unknown_phase_is_refused_and_no_clock_costs_nothing():
    with pytest.raises(ValueError, match="unknown phase 'host'"):
        with PhaseClock("cpu").phase("host"):
            pass
    with NO_CLOCK.phase("anything"):
        pass
