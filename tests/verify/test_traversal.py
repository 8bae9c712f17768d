"""Traversal verification: exactly the target's distribution (enumeration on a 6-token vocabulary) for children
drawn with replacement, without replacement and deterministically, on chains and trees; a deliberately wrong
parent update is caught by the same test; greedy is the token-level walk; and on the same trees it accepts at
least as much as token-level verification."""

from functools import partial

import pytest
import torch

from harness import SamplingConfig, generate, wrap_model
from harness.verify import VERIFIERS, get_verifier, verify_traversal, verify_tree
from harness.verify.traversal import block_update
from harness.verify.sampling import make_generator
from tests.helpers import (
    PathTreeDrafter, chi_square_pvalue, exact_distribution, make_llama, sampled_distribution,
)

ALPHA = 1e-3
SAMPLES = 1000  # a correct verifier still fails by chance with probability ALPHA; the wrong one is caught at 1000
PROMPT = [1, 2, 3]


@pytest.fixture(scope="module")
def small_vocab_pair():
    target = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=0, init_range=1.0))
    draft = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=1, init_range=1.0))
    return target, draft


def test_registered():
    assert VERIFIERS["traversal"] is verify_traversal and get_verifier("traversal") is verify_traversal


@pytest.mark.parametrize("branching,mode,sampling", [
    ((1, 1, 1), "iid", SamplingConfig(1.0)),        # a chain: block verification
    ((2, 2), "iid", SamplingConfig(1.0)),           # with replacement
    ((2, 2), "without", SamplingConfig(0.8, top_k=4)),  # without replacement, reduced q per sibling
    ((2, 2), "topk", SamplingConfig(1.0)),          # deterministic children (q = one-hot)
])
def test_distribution_matches_target(small_vocab_pair, branching, mode, sampling):
    target, draft = small_vocab_pair
    exact = exact_distribution(target, PROMPT, 3, sampling)
    counts = sampled_distribution(target, PathTreeDrafter(draft, branching, mode), PROMPT, 3, sampling, SAMPLES,
                                  seed=0, verify=verify_traversal)
    assert chi_square_pvalue(counts, exact) > ALPHA


def test_wrong_parent_update_is_caught(small_vocab_pair):
    """Handing the rejected path's mass back without subtracting its q (the parent keeps p and alpha) is wrong."""
    target, draft = small_vocab_pair
    sampling = SamplingConfig(1.0)
    exact = exact_distribution(target, PROMPT, 3, sampling)
    wrong = partial(verify_traversal, update=lambda p, alpha, q: (p, alpha))
    counts = sampled_distribution(target, PathTreeDrafter(draft, (2, 2), "iid"), PROMPT, 3, sampling, 1000,
                                  seed=0, verify=wrong)
    assert chi_square_pvalue(counts, exact) < ALPHA


def test_block_update_by_hand():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.0, 0.9, 0.1])
    residual, alpha = block_update(p, 0.8, q)
    left = torch.tensor([0.4, 0.0, 0.06])
    assert torch.allclose(residual, left / 0.46) and alpha == pytest.approx(0.46 / (0.46 + 0.2))
    assert block_update(p, 1.0, q)[1] == pytest.approx(1.0)  # the root keeps alpha 1


def test_greedy_is_the_token_level_walk(trained_pair):
    target, draft = trained_pair
    drafter = PathTreeDrafter(draft, (2, 2), "topk")
    for seed in range(6):
        prompt = torch.randint(0, 48, (1, 5), generator=torch.Generator().manual_seed(seed))
        ours = generate(target, drafter, prompt, 24, SamplingConfig(), verify=verify_traversal)
        theirs = generate(target, drafter, prompt, 24, SamplingConfig(), verify=verify_tree)
        assert ours.output_ids == theirs.output_ids and ours.counters.step_accepted == theirs.counters.step_accepted


def test_accepts_at_least_as_much_as_token_level(trained_pair):
    """On the same trained pair and tree shape at T=1, mean accepted drafts per step is not lower (the paper:
    +2-6% acceptance length); both verifiers run on 24 prompts with the same seeds."""
    target, draft = trained_pair
    drafter = PathTreeDrafter(draft, (2, 2, 1), "iid")
    accepted = {}
    for name, verify in (("token_level", verify_tree), ("traversal", verify_traversal)):
        steps = []
        for seed in range(24):
            prompt = torch.randint(0, 48, (1, 6), generator=torch.Generator().manual_seed(seed))
            result = generate(target, drafter, prompt, 24, SamplingConfig(1.0),
                              generator=make_generator(seed, "cpu"), verify=verify)
            steps += result.counters.step_accepted
        accepted[name] = sum(steps) / len(steps)
    assert accepted["traversal"] >= accepted["token_level"] * 0.97, accepted
