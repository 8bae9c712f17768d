"""The conformance suite on a hybrid target (Bamba: Mamba2 layers and an attention layer; ``harness.hybrid``):
every catalog method emits `ar`'s greedy tokens there, its drafter trained on the hybrid target's own features and
the draft LM a pure Mamba2 LM (STree's drafter); the sampling check runs for `sd` and `tree_sd` (STree's chain and
tree, the drafter's own tree-state cache) and `eagle` (a hidden-state drafter on the hybrid's features). The other
methods drive the target through the same tree forward and commit as these (Polybasic's second crop in a step:
tests/hybrid). Batches are refused with one line: a recurrent state reads the padding."""

from __future__ import annotations

import pytest

from harness import generate
from harness.engine.batched import generate_batch
from harness.errors import DraftcountError
from tests.helpers import make_bamba, train_briefly
from tests.methods.conformance import GREEDY, METHODS, Zoo, check_sampled_distribution, prompts

SAMPLED = [method for method in ("sd", "tree_sd", "eagle") if method in METHODS]


@pytest.fixture(scope="module")
def hybrid_zoo(tmp_path_factory) -> Zoo:
    """A briefly trained hybrid target (3 layers, attention in the middle) and a 2-layer Mamba2 draft LM."""
    target = train_briefly(make_bamba(vocab=48, hidden=32, layers=3, attention=(1,), noise=0.0), 60)
    draft = train_briefly(make_bamba(vocab=48, hidden=16, layers=2, attention=(), seed=3, noise=0.0), 40)
    return Zoo(tmp_path_factory.mktemp("conformance-hybrid"), target, draft, 48, train_steps=20)


@pytest.fixture(scope="module")
def hybrid_ar(hybrid_zoo: Zoo) -> list[list[int]]:
    return [generate(hybrid_zoo.target, hybrid_zoo.build("ar"), prompt, 24, GREEDY).output_ids
            for prompt in prompts(6)]


@pytest.fixture(scope="module")
def small_hybrid_zoo(tmp_path_factory) -> Zoo:
    """Peaked random hybrids on 6 tokens (drafts often rejected, often accepted), as the 6-token zoo."""
    target = make_bamba(vocab=6, hidden=16, layers=2, attention=(1,), noise=1.0)
    draft = make_bamba(vocab=6, hidden=16, layers=1, attention=(), seed=1, noise=1.0)
    return Zoo(tmp_path_factory.mktemp("conformance-hybrid-sampling"), target, draft, 6, train_steps=0)


@pytest.mark.parametrize("method", METHODS)
def test_greedy_output_on_a_hybrid_target_equals_ar(hybrid_zoo: Zoo, hybrid_ar: list[list[int]], method: str):
    adapter = hybrid_zoo.build(method)
    accepted = 0
    for prompt, expected in zip(prompts(6), hybrid_ar):
        result = generate(hybrid_zoo.target, adapter, prompt, 24, GREEDY)
        assert result.output_ids == expected, f"{method} left ar's greedy output on prompt {prompt.tolist()}"
        accepted += result.counters.accepted_tokens
    if method in ("sd", "tree_sd"):  # a trained Mamba2 draft: paths longer than the root are committed by replay
        assert accepted > 0


@pytest.mark.parametrize("method", SAMPLED)
def test_sampled_distribution_on_a_hybrid_target_equals_the_target(small_hybrid_zoo: Zoo, method: str):
    check_sampled_distribution(small_hybrid_zoo, method)


def test_batches_on_a_hybrid_target_are_refused_with_one_line(hybrid_zoo: Zoo):
    with pytest.raises(DraftcountError, match="Mamba2 layers. Run it one request at a time") as refusal:
        generate_batch(hybrid_zoo.target, hybrid_zoo.build("ar"), [prompts(2)[0], prompts(2)[1][:, :3]], 4, GREEDY,
                       [None, None])
    assert "\n" not in str(refusal.value)
