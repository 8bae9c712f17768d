"""The conformance suite's greedy check (every method and hedgespec pair emits `ar`'s tokens in float32), its host-read
audit, its budget of ops per step outside graphed forwards and the drafter kit's rules: useful drafter work booked,
every drafter FLOP booked once (``flops.py``), a trained drafter's agreement per draft step recorded (see the package
docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from harness import SamplingConfig, generate
from harness.analysis.metrics import SETTLED_DRAFTER_FLOPS, USEFUL_DRAFTER_FLOPS
from harness.catalog import entry
from harness.engine.batched import generate_batch
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.errors import DraftcountError
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.engine.counters import GenerationCounters
from harness.engine.loop import Generation
from harness.measure.diagnostics.dispatch import dispatch_per_step
from harness.measure.diagnostics.host_sync import audit_generation
from harness.training.drafters import AGREEMENT, checked_agreement
from harness.training.gates import gate_failures, heldout_agreement
from tests.helpers import ENGINE_SWITCHES, assert_drafts_as_eager, engine_runtime, record_drafts
from tests.methods.conformance import (CASES, DEFAULT_DISPATCH_BUDGET, DISPATCH_BUDGETS, GREEDY, HOST_READ_BUDGETS,
                                        METHODS, NO_DRAFT_VOCAB, PARTNER, SAMPLED_VOCAB, TRAINED, VOCAB_CASES, Zoo,
                                        build_markov_zoo, method_of, prompts)
from tests.methods.conformance.flops import DrafterFlops, audited_generation, check_drafter_flops, over_estimate


DEFAULT_GATE = yaml.safe_load((Path(__file__).parents[3] / "workflow" / "config" / "default.yaml").read_text())[
    "gates"]["drafters"]["min_heldout_agreement"]  # the default run's gate on every drafter (0.2)


@pytest.fixture(scope="module")
def markov_zoo(tmp_path_factory) -> Zoo:
    return build_markov_zoo(tmp_path_factory.mktemp("conformance-greedy"))


@pytest.fixture(scope="module")
def ar_outputs(markov_zoo: Zoo) -> list[list[int]]:
    """`ar`'s greedy tokens on the prompts, computed once for every case."""
    ar, _ = build_adapter("ar", {}, BuildInputs(markov_zoo.target, None, None))
    return [generate(markov_zoo.target, ar, prompt, 32, GREEDY).output_ids for prompt in prompts()]


@dataclass
class GreedyRuns:
    """A case's greedy generations on the prompts, every token it drafted, and each generation's drafter FLOPs
    (``tests.methods.conformance.flops``: the first one counted by torch as well)."""

    results: list[Generation]
    tokens: list[int]
    flops: list[DrafterFlops]


@pytest.fixture(scope="module")
def greedy_runs(markov_zoo: Zoo):
    """A case's greedy runs (a draft-vocabulary case: half the prompts), run once for the checks that read them."""
    runs: dict[str, GreedyRuns] = {}

    def run(case: str) -> GreedyRuns:
        if case not in runs:
            adapter = markov_zoo.build(case)
            tokens = record_drafts(adapter)
            cases = prompts()[:6] if case in VOCAB_CASES else prompts()
            # torch counts the first generation's FLOPs; not a pair's second order, which runs the same experts
            counted = not case.startswith(f"hedgespec:{PARTNER},")
            done = [audited_generation(markov_zoo.target, adapter, prompt, 32, GREEDY, count=counted and index == 0)
                    for index, prompt in enumerate(cases)]
            runs[case] = GreedyRuns([result for result, _ in done], tokens, [flops for _, flops in done])
        return runs[case]

    return run


@pytest.mark.parametrize("method", CASES)
def test_greedy_output_equals_ar(markov_zoo: Zoo, greedy_runs, ar_outputs: list[list[int]], method: str):
    drafted, accepted, drafter_forwards, drafter_seconds = 0, 0, 0, 0.0
    results, tokens = greedy_runs(method).results, greedy_runs(method).tokens
    for prompt, expected, result in zip(prompts(), ar_outputs, results):
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
    trained = {method for method in METHODS if method_spec(method).train is not None and not entry(method).plugin}
    families = {family for family, _, _ in VOCAB_CASES.values() if not entry(family).plugin}
    assert trained == families | set(NO_DRAFT_VOCAB) & set(METHODS)


def check_drafter_work(method: str, counters: list[GenerationCounters]) -> None:
    """The kit's rule on drafter work (docs/extending.md, *The adapter*): the work whose output reached an accepted
    token is booked as useful through ``DrafterWork.settle`` (context work any draft needs through
    ``count_useful_drafter_flops``), so a method whose drafter ran and whose drafts were accepted books some; one
    that had drafts accepted below the first depth settles some (a first-depth draft may come from the context's
    own forward, as a head's does); and none books more than its drafter did (drafter-FLOP waste in [0, 1)). A
    composite (``hedgespec:A,B``) is not held to the settling rule: its accepted drafts may all be a model-free
    expert's; each expert is checked on its own."""
    flops = sum(one.drafter.flops for one in counters)
    useful = sum(one.extra.get(USEFUL_DRAFTER_FLOPS, 0.0) for one in counters)
    assert useful <= flops * (1 + 1e-9), (
        f"{method} booked {useful:.4g} useful drafter FLOPs, more than its drafter's {flops:.4g}: DrafterWork.settle "
        f"books a unit's FLOPs once, for the work charged this round")
    accepted = sum(one.accepted_tokens for one in counters)
    if flops > 0 and accepted > 0:
        assert useful > 0, (
            f"{method} had {accepted} draft tokens accepted but booked no useful drafter work: its drafter-FLOP waste "
            f"would read 100%; book the work whose output reached an accepted token with DrafterWork "
            f"(harness/engine/counters.py: charge in propose, settle in commit)")
    settled = sum(one.extra.get(SETTLED_DRAFTER_FLOPS, 0.0) for one in counters)
    deeper = sum(sum(one.accepted_by_depth[1:]) for one in counters)  # accepted drafts below the first depth
    if flops > 0 and deeper > 0 and ":" not in method:
        assert settled > 0, (
            f"{method} had {deeper} draft tokens accepted below the first depth but booked none of the work that "
            f"drafted them (useful drafter FLOPs {useful:.4g}, all of it context): its drafter-FLOP waste reads too "
            f"high; book the work whose output reached an accepted token with DrafterWork "
            f"(harness/engine/counters.py: charge in propose, settle in commit)")


@pytest.mark.parametrize("method", CASES)
def test_useful_drafter_work_is_booked(greedy_runs, method: str):
    check_drafter_work(method, [result.counters for result in greedy_runs(method).results])


@pytest.mark.parametrize("method", CASES)
def test_drafter_flops_booked_are_those_it_ran(greedy_runs, method: str):
    """The kit's rule that every drafter FLOP is booked once (``tests.methods.conformance.flops``): the drafter FLOPs
    in the counters equal what torch counted the drafter running, and what was charged to ``DrafterWork`` or counted
    useful outright equals them, on the same greedy runs."""
    check_drafter_flops(method, greedy_runs(method).flops, over_estimate(method, method_of(method)))


@pytest.mark.parametrize("method", TRAINED)
def test_a_trained_drafter_records_its_agreement_per_draft_step(markov_zoo: Zoo, method: str):
    """The kit's contract on the held-out agreement (``harness.training.drafters``), and the quality gate reading
    its first step: a drafter below the default run's gate (0.2) stops there, one above it does not. (60 steps on the
    Markov zoo's second-order language leave most drafters below 0.2: what the gate reads is checked, not how well
    these drafters learnt.)"""
    markov_zoo.drafter(method)
    metrics = markov_zoo.metrics[method]
    assert AGREEMENT in metrics, f"{method}'s trainer, given --heldout, records no {AGREEMENT}"
    agreement = checked_agreement(method, metrics[AGREEMENT])  # one share in [0, 1] per draft step, at least one
    assert metrics[AGREEMENT] == agreement and heldout_agreement(metrics) == agreement[0]  # what the gate reads
    stops = gate_failures(method, metrics, {"min_heldout_agreement": DEFAULT_GATE})
    assert bool(stops) == (agreement[0] < DEFAULT_GATE)
    assert stops == [] or stops[0].startswith(f"{method}: held-out top-1 agreement (first step) {agreement[0]:.3g}")
    for shift, stopped in ((1e-6, True), (-1e-6, False)):  # a gate just above step 1 stops it, just below does not
        assert bool(gate_failures(method, metrics, {"min_heldout_agreement": agreement[0] + shift})) == stopped


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
    check_drafter_work(method, [result.counters for result in results])
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


# Drafts graphed as one block of their own (the draft LM's, EAGLE's family, DFlash's and Medusa's have tests of
# their own: tests/engine/test_draft_lm.py, test_lyanna.py, test_dflash.py, test_medusa.py) or forward by forward.
GRAPHED_DRAFTS = [method for method in ("pard", "owl", "polybasic") if method in METHODS]


@pytest.mark.parametrize("method", GRAPHED_DRAFTS)
def test_a_graphed_draft_drafts_what_the_eager_draft_does(markov_zoo: Zoo, method: str):
    """Under cuda_graphs=on (graphs emulated on the CPU) the method emits the same tokens, accepts the same drafts
    and books the same drafter forwards, FLOPs and useful work as on the same static cache without graphs, greedy
    and at T = 1 (the sampled drafts drawn inside the block, from the same generator)."""
    for sampling in (GREEDY, SamplingConfig(1.0)):
        runs = {}
        for switch in ENGINE_SWITCHES:
            adapter, _ = build_adapter(method, {}, markov_zoo.inputs(method))
            runtime = engine_runtime(markov_zoo.target, switch)
            runs[switch] = [generate(markov_zoo.target, adapter, prompt, 16, sampling, runtime=runtime,
                                     generator=torch.Generator().manual_seed(seed))
                            for seed, prompt in enumerate(prompts()[:2])]
        graphs = runtime.graphs_of(adapter if method != "polybasic" else adapter.mid)  # polybasic: its mid LM's
        assert graphs is not None and graphs.calls > graphs.eager_calls  # the draft ran through its graphs
        assert_drafts_as_eager(runs["static"], runs["graph_buffers"])
