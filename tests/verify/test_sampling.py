"""The sampling warper matches transformers' generate() warpers; the residual is right."""

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from harness.errors import DraftcountError
from harness.verify.sampling import SamplingConfig, align_vocab, logits_to_probs, residual_distribution


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.5, 10, 0.6)])
def test_warper_matches_transformers(temperature, top_k, top_p):
    torch.manual_seed(0)
    logits = torch.randn(8, 50) * 3
    ours = logits_to_probs(logits, SamplingConfig(temperature, top_k, top_p))
    scores = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1:
        scores = TopPLogitsWarper(top_p)(None, scores)
    torch.testing.assert_close(ours, scores.softmax(-1))


def test_greedy_is_one_hot_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0]])
    assert logits_to_probs(logits, SamplingConfig()).tolist() == [[0.0, 1.0, 0.0]]


def test_residual_distribution():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.6, 0.2])
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(residual_distribution(p, p), p)


def test_align_vocab_pads_and_cuts():
    logits = torch.tensor([1.0, 2.0])
    assert align_vocab(logits, 3)[2] == float("-inf")
    assert align_vocab(torch.tensor([1.0, 2.0, 3.0]), 2).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_bad_sampling_settings(kwargs):
    with pytest.raises(DraftcountError):
        SamplingConfig(**kwargs)
