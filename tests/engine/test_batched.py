"""The static-batch engine: every row of a batch is lossless on its own. At T = 0 each row's tokens equal the same
prompt's batch-1 `ar` output (prompts of different lengths, rows finishing at different steps); at T = 1 a row of
a B = 4 batch follows the target's law (the enumeration test of the conformance suite, counted over the batch's
rows with the same prompt); methods that have not opted in are refused with one line."""

from collections import Counter

import pytest
import torch

from harness import SamplingConfig, generate, wrap_model
from harness.engine.batched import generate_batch
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.verify.sampling import make_generator
from tests.helpers import chi_square_pvalue, exact_distribution, make_llama, markov_batches

GREEDY = SamplingConfig()
PROMPTS = [row[None, : 3 + index % 7] for index, row in enumerate(next(markov_batches(48, 7, 10, seed=11)))]


def ar_output(target, prompt, eos):
    adapter, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    return generate(target, adapter, prompt, 20, GREEDY, eos_token_ids=eos).output_ids


@pytest.mark.parametrize("method,options", [("ar", {}), ("sd", {"gamma": 3}), ("sd", {"gamma": 1}),
                                            ("tree_sd", {"branching": "3,2,1"})])
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


@pytest.fixture(scope="module")
def small_vocab_pair():
    target = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=0, init_range=1.0))
    draft = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=1, init_range=1.0))
    return target, draft


@pytest.mark.parametrize("method,options", [("ar", {}), ("sd", {"gamma": 2}), ("tree_sd", {"branching": "2,2"})])
def test_a_row_of_a_batch_of_four_follows_the_target(small_vocab_pair, method, options):
    """Rows 0 and 2 answer [1, 2, 3]; rows 1 and 3 other prompts (longer, shorter: left padding, other
    positions). 750 batches give 1500 samples of the first three tokens."""
    target, draft = small_vocab_pair
    sampling = SamplingConfig(1.0)
    adapter, _ = build_adapter(method, options, BuildInputs(target, draft, None))
    prompts = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 1, 2, 3, 5]]), torch.tensor([[1, 2, 3]]),
               torch.tensor([[2]])]
    counts: Counter = Counter()
    for batch in range(750):
        generators = [make_generator(4 * batch + row, "cpu") for row in range(4)]
        results = generate_batch(target, adapter, prompts, 3, sampling, generators)
        counts.update(tuple(results[row].output_ids) for row in (0, 2))
    assert chi_square_pvalue(counts, exact_distribution(target, [1, 2, 3], 3, sampling)) > 1e-3


def test_methods_not_opted_in_are_refused(trained_pair):
    target, draft = trained_pair
    pld, _ = build_adapter("pld", {}, BuildInputs(target, None, None))
    with pytest.raises(DraftcountError, match="one request at a time") as error:
        generate_batch(target, pld, PROMPTS[:2], 4, GREEDY, [None, None])
    assert "\n" not in str(error.value)
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    with pytest.raises(DraftcountError, match="as many generators"):
        generate_batch(target, ar, PROMPTS[:2], 4, GREEDY, [None])
