"""Sampling lossless: the distribution of the first three generated tokens equals the target's.

On a vocabulary of 6 the exact distribution of every 3-token continuation is
enumerated; generations are sampled and compared by a chi-square goodness of
fit test. The seeds are fixed, so the test is deterministic; at ALPHA a correct
verifier fails by chance with probability 1e-3, while the deliberately wrong
verifier (no residual after a rejection) lands hundreds of orders of magnitude
below it.
"""

import pytest

from harness import SamplingConfig, wrap_model
from harness.engine.method_spec import BuildInputs, build_adapter
from tests.helpers import (
    PathTreeDrafter, chi_square_pvalue, exact_distribution, make_llama, sampled_distribution, skip_residual_verifier,
)

ALPHA = 1e-3
PROMPT = [1, 2, 3]
LENGTH = 3


@pytest.fixture(scope="module")
def small_vocab_pair():
    """Peaked, disagreeing distributions so drafts are often rejected and often accepted."""
    target = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=0, init_range=1.0))
    draft = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=1, init_range=1.0))
    return target, draft


def _adapter(kind, target, draft):
    if kind == "sd":
        return build_adapter("sd", {"gamma": 2}, BuildInputs(target, draft, None))[0]
    mode = kind.split("-")[1]
    return PathTreeDrafter(draft, (2, 2), mode)


@pytest.mark.parametrize("kind,sampling", [  # sd, and a tree drawn with replacement (tree_sd), at T=1 with default
    ("sd", SamplingConfig(0.8, top_k=4, top_p=0.9)),  # options: tests/methods/conformance/
    ("tree-topk", SamplingConfig(1.0)),
    ("tree-iid", SamplingConfig(0.7, top_k=3)),
])
def test_distribution_matches_target(small_vocab_pair, kind, sampling):
    target, draft = small_vocab_pair
    exact = exact_distribution(target, PROMPT, LENGTH, sampling)
    counts = sampled_distribution(target, _adapter(kind, target, draft), PROMPT, LENGTH, sampling, 1000, seed=0)
    assert chi_square_pvalue(counts, exact) > ALPHA


@pytest.mark.parametrize("kind", ["sd", "tree-iid"])
def test_wrong_verifier_is_caught(small_vocab_pair, kind):
    target, draft = small_vocab_pair
    sampling = SamplingConfig(1.0)
    exact = exact_distribution(target, PROMPT, LENGTH, sampling)
    counts = sampled_distribution(target, _adapter(kind, target, draft), PROMPT, LENGTH, sampling, 1000, seed=0,
                                  verify=skip_residual_verifier())
    assert chi_square_pvalue(counts, exact) < ALPHA
