"""The static-batch engine beyond the conformance suite's batch checks (tests/methods/conformance: every batched
method's rows equal `ar` and batch 1 at T = 0, a row of a B = 4 batch passes the enumeration test): rows that stop
at an EOS leave the batch at different steps, other draft shapes (a chain of one, a wide tree), rows whose trees
differ in size in one step (padded), and one-line refusals."""

import copy

import pytest
import torch

from harness import SamplingConfig, generate
from harness.engine.adapter import AdapterBase
from harness.engine.batched import generate_batch
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.trees.tree import chain_tree
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


class OracleChain(AdapterBase):
    """Drafts a chain of 1 + root % 3 tokens, the target's own greedy continuation (computed without a cache): row
    trees of different sizes in one step, so the batch pads them (a test drafter, not a method)."""

    def __init__(self, target) -> None:
        self.target = target
        self.max_draft_nodes = 3

    def propose(self, ctx, sequence):
        drafts, context = [], sequence
        for _ in range(1 + int(sequence[0, -1]) % 3):
            token = self.target.model(context).logits[0, -1].argmax()
            drafts.append(int(token))
            context = torch.cat([context, token.reshape(1, 1)], dim=-1)
        return chain_tree(int(sequence[0, -1]), drafts, sequence.device)

    def batch_row(self):
        return copy.copy(self)


def test_row_trees_of_different_sizes_are_padded(trained_pair):
    target, _ = trained_pair
    adapter = OracleChain(target)
    results = generate_batch(target, adapter, PROMPTS, 20, GREEDY, [None] * len(PROMPTS))
    assert [result.output_ids for result in results] == [ar_output(target, prompt, frozenset()) for prompt in PROMPTS]
    single = [generate(target, adapter, prompt, 20, GREEDY).counters for prompt in PROMPTS]
    assert [result.counters.step_accepted for result in results] == [one.step_accepted for one in single]
    assert {size for one in single for size in one.step_accepted} >= {1, 2, 3}  # the rows' chains differ in length


def test_unfused_verification_is_refused(trained_pair):
    target, _ = trained_pair
    adapter = OracleChain(target)
    adapter.separate_root_forward = True
    with pytest.raises(DraftcountError, match="unfused verification") as error:
        generate_batch(target, adapter, PROMPTS[:2], 4, GREEDY, [None, None])
    assert "\n" not in str(error.value)
