"""The drafting conventions at T > 0 (issue 79): top-k children verified as q = 1, or sampled ones carrying their q;
at T = 0 both are greedy. The beam drafters' draws come from ``beam_draws``."""

import torch

from harness.engine.adapter import StepContext
from harness.engine.counters import GenerationCounters
from harness.engine.drafting import CHOOSERS, beam_draws, choose_children, top_children
from harness.trees.beam_shape import BeamShape
from harness.verify.sampling import SamplingConfig


def _ctx(temperature: float) -> StepContext:
    return StepContext(SamplingConfig(temperature), torch.Generator().manual_seed(0), GenerationCounters(), 8)


def test_top_k_children_are_deterministic_at_every_temperature_and_sampled_ones_carry_q():
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0, -1.0, 0.5])  # 6 draft logits, the target's vocabulary 8
    for temperature in (0.0, 1.0):
        chosen = top_children(logits, 2, _ctx(temperature), False)
        assert [int(token) for token, _ in chosen] == [1, 3] and all(q is None for _, q in chosen)
    assert [int(token) for token, _ in choose_children(logits, 2, _ctx(0.0), False)] == [1, 3]  # greedy: the same
    sampled = choose_children(logits, 3, _ctx(1.0), False)
    tokens = [int(token) for token, _ in sampled]
    assert len(set(tokens)) == 3 and all(q.shape == (8,) and q[token] > 0 for token, (_, q) in zip(tokens, sampled))
    assert float(sampled[1][1][tokens[0]]) == 0.0  # without replacement: the first draw is out of the second's q
    assert set(CHOOSERS) == {"sampled", "topk"}


def test_a_beam_samples_only_with_the_sampled_convention_above_t_zero():
    assert beam_draws(_ctx(1.0), BeamShape(drafts="topk")) is None
    assert beam_draws(_ctx(0.0), BeamShape(drafts="sampled")) is None
    draws = beam_draws(_ctx(1.0), BeamShape(drafts="sampled"))
    assert draws is not None and draws.vocab_size == 8
    assert float(draws.warp(torch.zeros(1, 4)).sum()) == 1.0
