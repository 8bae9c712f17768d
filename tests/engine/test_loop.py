"""Greedy lossless: every method emits exactly the tokens `ar` emits (float32)."""

import pytest
import torch

from harness import SamplingConfig, generate
from harness.engine.method_spec import BuildInputs, build_adapter
from tests.helpers import PathTreeDrafter

GREEDY = SamplingConfig()
PROMPTS = [torch.randint(0, 48, (1, 3 + i % 9), generator=torch.Generator().manual_seed(i)) for i in range(24)]


def _ar_outputs(target, max_new_tokens=40):
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    return [generate(target, ar, prompt, max_new_tokens, GREEDY).output_ids for prompt in PROMPTS]


def test_ar_equals_transformers_generate(random_pair):
    target, _ = random_pair
    expected = _ar_outputs(target, 24)
    for prompt, ours in zip(PROMPTS[:8], expected[:8]):
        theirs = target.model.generate(prompt, max_new_tokens=24, do_sample=False)[0, prompt.shape[1]:].tolist()
        assert ours == theirs


@pytest.mark.parametrize("pair", ["random_pair", "trained_pair"])
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_sd_greedy_equals_ar(request, pair, gamma):
    target, draft = request.getfixturevalue(pair)
    expected = _ar_outputs(target)
    sd, _ = build_adapter("sd", {"gamma": gamma}, BuildInputs(target, draft, None))
    accepted = 0
    for prompt, reference in zip(PROMPTS, expected):
        result = generate(target, sd, prompt, 40, GREEDY)
        assert result.output_ids == reference
        accepted += result.counters.accepted_tokens
    assert accepted > 0, "the drafts were never accepted: the test would not exercise the accept path"


@pytest.mark.parametrize("branching,mode", [((2, 2), "topk"), ((3, 1, 1), "topk"), ((1, 2, 2), "iid")])
def test_tree_verifier_greedy_equals_ar(trained_pair, branching, mode):
    target, draft = trained_pair
    expected = _ar_outputs(target)
    drafter = PathTreeDrafter(draft, branching, mode)
    for prompt, reference in zip(PROMPTS, expected):
        assert generate(target, drafter, prompt, 40, GREEDY).output_ids == reference
