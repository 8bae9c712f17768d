"""The static-batch engine beyond the conformance suite's batch checks (tests/methods/conformance: every batched
method's rows equal `ar` and batch 1 at T = 0, a row of a B = 4 batch passes the enumeration test): rows that stop
at an EOS leave the batch at different steps, other draft shapes (a chain of one, a wide tree), and one-line
refusals."""

import pytest

from harness import SamplingConfig, generate
from harness.engine.batched import generate_batch
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from tests.helpers import markov_batches

GREEDY = SamplingConfig()
PROMPTS = [row[None, : 3 + index % 7] for index, row in enumerate(next(markov_batches(48, 7, 10, seed=11)))]


def ar_output(target, prompt, eos):
    adapter, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    return generate(target, adapter, prompt, 20, GREEDY, eos_token_ids=eos).output_ids


@pytest.mark.parametrize("method,options", [("ar", {}), ("sd", {"gamma": 1}), ("tree_sd", {"branching": "3,2,1"})])
@pytest.mark.parametrize("eos", [frozenset(), frozenset({7})], ids=["no-eos", "eos"])
def test_each_row_equals_its_batch_one_output(trained_pair, method, options, eos):
    target, draft = trained_pair
    expected = [ar_output(target, prompt, eos) for prompt in PROMPTS]
    adapter, _ = build_adapter(method, options, BuildInputs(target, draft, None))
    results = generate_batch(target, adapter, PROMPTS, 20, GREEDY, [None] * len(PROMPTS), eos_token_ids=eos)
    assert [result.output_ids for result in results] == expected
    if eos:
        assert len({len(output) for output in expected}) > 1  # rows left the batch at different steps
    if method != "ar":  # the same drafts as batch 1 (the draft LM's cache kept right): the same acceptance per step
        single = [generate(target, adapter, prompt, 20, GREEDY, eos_token_ids=eos).counters for prompt in PROMPTS]
        assert [result.counters.step_accepted for result in results] == [one.step_accepted for one in single]
        assert sum(result.counters.accepted_tokens for result in results) > 0


def test_methods_not_opted_in_are_refused(trained_pair):
    target, draft = trained_pair
    pld, _ = build_adapter("pld", {}, BuildInputs(target, None, None))
    with pytest.raises(DraftcountError, match="one request at a time") as error:
        generate_batch(target, pld, PROMPTS[:2], 4, GREEDY, [None, None])
    assert "\n" not in str(error.value)
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    with pytest.raises(DraftcountError, match="as many generators"):
        generate_batch(target, ar, PROMPTS[:2], 4, GREEDY, [None])
