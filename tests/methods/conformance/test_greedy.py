"""The conformance suite's greedy check (every method and hedgespec pair emits `ar`'s tokens in float32) and its
host-read audit and its budget of ops per step outside graphed forwards (see the package docstring)."""

from __future__ import annotations

import pytest
import torch

from harness import SamplingConfig, generate
from harness.catalog import entry
from harness.engine.batched import generate_batch
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.errors import DraftcountError
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.measure.dispatch import dispatch_per_step
from harness.measure.host_sync import audit_generation
from tests.helpers import record_drafts
from tests.methods.conformance import (CASES, DEFAULT_DISPATCH_BUDGET, DISPATCH_BUDGETS, GREEDY, HOST_READ_BUDGETS,
                                        METHODS, NO_DRAFT_VOCAB, SAMPLED_VOCAB, VOCAB_CASES, Zoo, build_markov_zoo,
                                        method_of, prompts)


@pytest.fixture(scope="module")
def markov_zoo(tmp_path_factory) -> Zoo:
    return build_markov_zoo(tmp_path_factory.mktemp("conformance-greedy"))


@pytest.fixture(scope="module")
def ar_outputs(markov_zoo: Zoo) -> list[list[int]]:
    """`ar`'s greedy tokens on the prompts, computed once for every case."""
    ar, _ = build_adapter("ar", {}, BuildInputs(markov_zoo.target, None, None))
    return [generate(markov_zoo.target, ar, prompt, 32, GREEDY).output_ids for prompt in prompts()]


@pytest.mark.parametrize("method", CASES)
def test_greedy_output_equals_ar(markov_zoo: Zoo, ar_outputs: list[list[int]], method: str):
    adapter = markov_zoo.build(method)
    drafted, accepted, drafter_forwards, drafter_seconds = 0, 0, 0, 0.0
    tokens = record_drafts(adapter)
    cases = prompts()[:6] if method in VOCAB_CASES else prompts()  # a draft vocabulary: half the prompts
    for prompt, expected in zip(cases, ar_outputs):
        result = generate(markov_zoo.target, adapter, prompt, 32, GREEDY)
        assert result.output_ids == expected, f"{method} left ar's greedy output on prompt {prompt.tolist()}"
        drafted += result.counters.drafted_tokens
        accepted += result.counters.accepted_tokens
        drafter_forwards += result.counters.drafter.forwards
        drafter_seconds += result.counters.phase_seconds["drafter"]
    drafts = entry(method_of(method)).drafts  # a hedgespec pair: hedgespec's entry
    assert (drafted > 0) == drafts, f"{method} drafted {drafted} tokens; its catalog entry says drafts={drafts}"
    if method in VOCAB_CASES:  # a draft vocabulary: every drafted token is in its map, and some are accepted
        kept = markov_zoo.draft_ids(method)
        assert len(kept) == markov_zoo.vocab // 2 and tokens and set(tokens) <= kept, f"{method} drafted outside its map"
        assert accepted > 0, f"{method} had no draft accepted: its lossless check saw no acceptance"
    # a method whose drafter runs forwards has them timed as the drafter phase (none: no drafter time)
    assert (drafter_seconds > 0) == (drafter_forwards > 0), f"{method}: drafter forwards not timed as drafter"


def test_every_drafter_family_is_checked_with_a_draft_vocabulary_or_says_why_not():
    trained = {method for method in METHODS if method_spec(method).train is not None}
    assert trained == {family for family, _, _ in VOCAB_CASES.values()} | set(NO_DRAFT_VOCAB)


@pytest.mark.parametrize("method", METHODS)
def test_batches_keep_every_row_lossless_or_are_refused(markov_zoo: Zoo, method: str):
    """A batched method: every row of one batch (prompts of 4 to 8 tokens: left padding) emits `ar`'s tokens, with
    the accepted drafts of a batch-1 generation at every step (its drafter state kept per row); any other: one
    line."""
    adapter = markov_zoo.build(method)
    batch = [prompt[:, : 4 + index % 5] for index, prompt in enumerate(prompts())]
    if not entry(method).batched:
        with pytest.raises(DraftcountError, match="one request at a time") as refusal:
            generate_batch(markov_zoo.target, adapter, batch, 32, GREEDY, [None] * len(batch))
        assert "\n" not in str(refusal.value)
        return
    results = generate_batch(markov_zoo.target, adapter, batch, 32, GREEDY, [None] * len(batch))
    ar = markov_zoo.build("ar")
    assert [result.output_ids for result in results] == [
        generate(markov_zoo.target, ar, prompt, 32, GREEDY).output_ids for prompt in batch]
    single = [generate(markov_zoo.target, adapter, prompt, 32, GREEDY).counters for prompt in batch]
    assert [result.counters.step_accepted for result in results] == [one.step_accepted for one in single]
    assert entry(method).drafts == (sum(result.counters.accepted_tokens for result in results) > 0)


@pytest.mark.parametrize("method", [*METHODS, *SAMPLED_VOCAB])
def test_at_most_one_host_read_per_step(markov_zoo: Zoo, method: str):
    target = markov_zoo.target
    adapter = markov_zoo.build(method)
    runtime = EngineRuntime(target, EngineOptions(kv_cache="static"))
    budget, why = HOST_READ_BUDGETS.get(method_of(method), (1, "the verifier's read alone"))
    for sampling in (GREEDY, SamplingConfig(1.0)):
        audit = audit_generation(target, adapter, prompts()[0], 24, sampling, runtime,
                                 torch.Generator().manual_seed(0))
        assert audit.steps > 1 and audit.reads_per_step <= budget, (
            f"{method} at T={sampling.temperature:g}: {audit.reads_per_step:.2f} host reads per step, over its "
            f"budget {budget} ({why}): {audit.by_operation}")
        # every synchronising call, host-to-device copies from pageable memory included: what CUDA counts (the
        # quick GPU check found polybasic uploading each drafted token apart, 14.75 a step)
        assert audit.per_step <= budget, (
            f"{method} at T={sampling.temperature:g}: {audit.per_step:.2f} synchronising calls per step, over its "
            f"budget {budget} ({why}): {audit.by_operation}")


@pytest.mark.parametrize("method", METHODS)
def test_ops_outside_graphs_per_step_within_budget(markov_zoo: Zoo, method: str):
    """What a step launches beside its graph replays stays within the method's budget (DISPATCH_BUDGETS), greedy
    and sampling, under CUDA-graph semantics emulated on the CPU."""
    adapter, _ = build_adapter(method, {}, markov_zoo.inputs(method))
    for sampling, budget in zip((GREEDY, SamplingConfig(1.0)), DISPATCH_BUDGETS.get(method, DEFAULT_DISPATCH_BUDGET)):
        runtime = EngineRuntime(markov_zoo.target, EngineOptions(kv_cache="static", cuda_graphs="on"), capture=False)
        counts = dispatch_per_step(markov_zoo.target, adapter, prompts()[0], 24, sampling, runtime,
                                   lambda: torch.Generator(device="cpu").manual_seed(0))
        assert counts.graph > 0, f"{method}: no graphed forward ran (the target's verify forward is graphed)"
        assert counts.total() <= budget, (
            f"{method} at T={sampling.temperature:g}: {counts.total():.1f} ops outside graphs per step, over its "
            f"budget {budget}; most dispatched: {counts.top}")
