"""EOS, max_new_tokens and counter consistency, for every method."""

import pytest
import torch

from harness import SamplingConfig, generate
from harness.analysis.metrics import USEFUL_DRAFTER_FLOPS
from harness.backend.phases import PHASES
from harness.engine.loop import trim_output
from harness.engine.method_spec import BuildInputs, build_adapter
from tests.helpers import PathTreeDrafter

PROMPTS = [torch.randint(0, 48, (1, 5), generator=torch.Generator().manual_seed(100 + i)) for i in range(6)]


def _adapters(target, draft):
    inputs = BuildInputs(target, draft, None)
    return {
        "ar": build_adapter("ar", {}, inputs)[0],
        "sd1": build_adapter("sd", {"gamma": 1}, inputs)[0],
        "sd4": build_adapter("sd", {"gamma": 4}, inputs)[0],
        "tree": PathTreeDrafter(draft, (2, 2, 1), "topk"),
    }


def test_trim_output():
    assert trim_output([1, 2, 9, 3], frozenset({9}), 10) == ([1, 2, 9], "eos")
    assert trim_output([1, 2, 3, 4], frozenset({9}), 3) == ([1, 2, 3], "max_new_tokens")
    assert trim_output([1, 2, 3, 9], frozenset({9}), 3) == ([1, 2, 3], "max_new_tokens")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_eos_stops_every_method_at_the_same_place(trained_pair, temperature):
    target, draft = trained_pair
    adapters = _adapters(target, draft)
    sampling = SamplingConfig(temperature)
    for index, prompt in enumerate(PROMPTS):
        free = generate(target, adapters["ar"], prompt, 30, sampling, generator=torch.Generator().manual_seed(index))
        eos = free.output_ids[7]
        expected = free.output_ids[: free.output_ids.index(eos) + 1]
        for name, adapter in adapters.items():
            if temperature > 0 and name != "ar":
                continue  # sampled outputs of different methods agree in distribution, not token for token
            result = generate(target, adapter, prompt, 30, sampling, frozenset({eos}),
                              generator=torch.Generator().manual_seed(index))
            assert result.output_ids == expected, name
            assert result.counters.stop_reason == "eos"
            assert result.counters.new_tokens == len(expected)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("max_new_tokens", [1, 2, 7, 33])
def test_max_new_tokens_is_exact_and_counters_are_consistent(trained_pair, temperature, max_new_tokens):
    target, draft = trained_pair
    for name, adapter in _adapters(target, draft).items():
        for index, prompt in enumerate(PROMPTS[:3]):
            result = generate(target, adapter, prompt, max_new_tokens, SamplingConfig(temperature),
                              generator=torch.Generator().manual_seed(index))
            counters = result.counters
            assert len(result.output_ids) == max_new_tokens == counters.new_tokens, name
            assert counters.stop_reason == "max_new_tokens"
            # one entry per target forward: the prefill yields 1 token, each verification accepted + 1
            assert len(counters.step_tokens) == counters.target.forwards
            assert counters.step_tokens[0] == 1
            assert counters.step_tokens[1:] == [accepted + 1 for accepted in counters.step_accepted]
            assert counters.accepted_tokens == sum(counters.step_accepted)
            # only the last step can be cut by max_new_tokens
            assert sum(counters.step_tokens[:-1]) < max_new_tokens <= sum(counters.step_tokens)
            assert counters.tokens_per_forward == pytest.approx(max_new_tokens / counters.target.forwards)
            assert counters.drafted_tokens == sum(counters.drafted_by_depth)
            assert counters.accepted_tokens == sum(counters.accepted_by_depth)
            assert counters.accepted_tokens <= counters.tried_tokens <= counters.drafted_tokens
            assert counters.wall_seconds >= counters.prefill_seconds > 0
            phases = counters.phase_seconds  # the wall time split by phase, exactly
            assert list(phases) == list(PHASES) and sum(phases.values()) == pytest.approx(counters.wall_seconds)
            assert phases["prefill"] > 0 and phases["verify"] > 0 and min(phases.values()) >= 0
            if name == "ar":
                assert counters.drafter.forwards == 0 and counters.drafted_tokens == 0 and counters.tokens_per_forward == 1.0
                assert phases["drafter"] == 0
            elif max_new_tokens > 1:  # one token comes from the prefill alone
                assert counters.drafter.forwards > 0 and counters.drafter.flops > 0
                assert phases["drafter"] > 0 and phases["target"] > 0


def test_a_rejected_depth_one_draft_books_waste(trained_pair):
    """sd with gamma 1 drafts its one token from the forward that also feeds the accepted text (the context): that
    forward's drafting position is wasted when the draft is rejected, its context positions are useful; a step whose
    draft is accepted wastes nothing (book_drafting_forward)."""
    target, draft = trained_pair
    adapter = build_adapter("sd", {"gamma": 1}, BuildInputs(target, draft, None))[0]
    rejected = 0
    for index, prompt in enumerate(PROMPTS):
        counters = generate(target, adapter, prompt, 24, SamplingConfig(1.0),
                            generator=torch.Generator().manual_seed(index)).counters
        wasted = counters.drafter.flops - counters.extra[USEFUL_DRAFTER_FLOPS]
        rejected += counters.step_accepted.count(0)
        if counters.step_accepted.count(0):
            assert wasted > 0.01 * counters.drafter.flops, index
        else:
            assert wasted == pytest.approx(0, abs=1e-6 * counters.drafter.flops), index
    assert rejected > 0  # the check above ran
