"""The conformance suite's own checks catch what they are for, and say what they caught: deliberately buggy drafters
fail the drafter-FLOP check (``tests/methods/conformance/flops.py``) with a message giving the share they booked,
while `eagle` passes it; a sample off the target's law fails the sampling check with its statistic, p-value and worst
cells (``assert_follows_the_target``)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from harness.catalog import Entry
from harness.engine.counters import DrafterWork
from harness.errors import DraftcountError
from harness.trees.beam_shape import BeamShape
from methods.eagle.adapter import EagleAdapter
from methods.eagle.checkpoint import load_head
from tests.methods.conformance import ALPHA, GREEDY, Zoo, assert_follows_the_target, build_small_vocab_zoo
from tests.methods.conformance.flops import audited_generation, check_drafter_flops

PROMPTS = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 1, 2, 3, 5]])]
CHAIN = BeamShape(top_k=1, depth=3, budget=3)  # three draft steps: the catch-up forward, then two expansions


class UnchargedWork(DrafterWork):
    """Takes no charge: the drafter's expansions go unbooked."""

    def charge(self, units: list, flops: float) -> None:
        pass


class FirstStepEagle(EagleAdapter):
    """A deliberately buggy drafter: an EAGLE chain of three draft steps that charges nothing to ``DrafterWork``, so
    it books only the catch-up forward's context positions (counted useful outright; its drafting position's share
    is a charge since the waste is booked by what a forward produced); its two expansions are counted in its
    counters but never charged. Its drafter-FLOP waste would read wrong, and it passes every other check."""

    def _reset(self, ctx=None) -> None:
        super()._reset(ctx)
        self.work = UnchargedWork()


class FirstStepCountedEagle(EagleAdapter):
    """A deliberately buggy drafter: the same chain counting only its first step's forward in its counters
    (``ctx.counters.drafter``); it charges every step's work to ``DrafterWork``."""

    def _forward(self, ctx, *args, step: int = 1, **kwargs):
        tally = ctx.counters.drafter
        before = (tally.forwards, tally.tokens, tally.flops)
        out = super()._forward(ctx, *args, step=step, **kwargs)
        if step > 1:
            tally.forwards, tally.tokens, tally.flops = before
        return out


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Zoo:
    return build_small_vocab_zoo(tmp_path_factory.mktemp("conformance-checks"))


def drafter_flops(zoo: Zoo, kind: type[EagleAdapter]):
    """The suite's runs in small: greedy generations, the first one counted by torch, under ``kind``'s chain."""
    adapter = kind(load_head(zoo.drafter("eagle"), zoo.target.model), zoo.target, CHAIN)
    return [audited_generation(zoo.target, adapter, prompt, 24, GREEDY, count=index == 0)[1]
            for index, prompt in enumerate(PROMPTS)]


def test_eagle_books_the_drafter_flops_it_runs(zoo: Zoo):
    runs = drafter_flops(zoo, EagleAdapter)
    assert all(run.tally > 0 and run.charged > 0 for run in runs) and runs[0].counted > 0
    check_drafter_flops("eagle", runs)


def test_a_drafter_booking_its_first_step_alone_fails_saying_what_it_booked(zoo: Zoo):
    runs = drafter_flops(zoo, FirstStepEagle)
    with pytest.raises(AssertionError, match=r"^first_step booked \d+\.\d%( \(about \d/\d\))? of the drafter FLOPs "
                                             r"it ran \(.*: 0 charged to DrafterWork") as failure:
        check_drafter_flops("first_step", runs)
    assert "\n" not in str(failure.value)


def test_a_drafter_counting_its_first_step_alone_fails_saying_what_it_counted(zoo: Zoo):
    runs = drafter_flops(zoo, FirstStepCountedEagle)
    with pytest.raises(AssertionError, match=r"^first_counted's counters hold .* drafter FLOPs, 3\d\.\d%( \(about "
                                             r"\d/\d\))? of the .* torch counted its drafter running"):
        check_drafter_flops("first_counted", runs)
    # an over-estimate by a stated rule passes; an under-count fails whatever the rule
    with pytest.raises(AssertionError, match="counters hold"):
        check_drafter_flops("first_counted", runs, why_over="a stated rule")


def test_only_a_method_with_a_drafter_declares_a_draft_vocabulary():
    assert Entry("x", "m", "s", "drafter", draft_vocab=True).draft_vocab
    with pytest.raises(DraftcountError, match="draft_vocab says how its drafter trains; it needs a trained drafter"):
        Entry("x", "m", "s", "draft", draft_vocab=True)


def test_a_sample_off_the_targets_law_fails_with_its_statistic_p_value_and_worst_cells():
    exact = {(token,): probability for token, probability in enumerate([0.4, 0.3, 0.2, 0.07, 0.03])}
    right = Counter({(0,): 400, (1,): 303, (2,): 197, (3,): 71, (4,): 29})
    assert_follows_the_target("right", right, exact)
    wrong = Counter({(0,): 330, (1,): 300, (2,): 270, (3,): 70, (4,): 30})  # 0's mass moved to 2
    with pytest.raises(AssertionError) as failure:
        assert_follows_the_target("wrong", wrong, exact)
    message = str(failure.value)
    assert message.startswith("wrong does not sample the target's distribution at T = 1: chi-square 36.8 on 4 "
                              "degrees of freedom, p = ") and "\n" not in message
    assert float(message.split("p = ")[1].split(";")[0]) < ALPHA
    assert "worst cells: (2,): observed 270, expected 200.0, (0,): observed 330, expected 400.0, (1,): observed 300, " \
           "expected 300.0" in message
