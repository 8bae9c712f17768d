"""Sampling: the one place that turns logits into a distribution and draws from it.

The `ar` baseline, every drafter and the verifier all use these functions, so a
method's output distribution can be compared with the baseline's exactly.
Order of warping follows transformers' generate(): temperature, then top-k,
then top-p.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.errors import DraftcountError


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 means greedy (argmax); top_k 0 and top_p 1.0 mean no filtering."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):  # nan passes a plain `< 0` check
            raise DraftcountError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if isinstance(self.top_k, bool) or int(self.top_k) != self.top_k or self.top_k < 0:
            raise DraftcountError(f"top_k must be a whole number >= 0, got {self.top_k}")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise DraftcountError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


def logits_to_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The sampling distribution (float32) over the last dimension of ``logits``.

    For greedy decoding this is the one-hot distribution of the argmax.
    """
    if sampling.is_greedy:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()
    scores = logits.float() / sampling.temperature
    if 0 < sampling.top_k < scores.shape[-1]:
        kth_best = torch.topk(scores, sampling.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth_best, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_before >= sampling.top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores.softmax(dim=-1)


def sample_from_probs(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs`` (shape (..., V) -> (...)), drawn on the device without a host read.

    The exponential race: argmax_i p_i / E_i with E_i ~ Exp(1) independent is token i with probability
    proportional to p_i (``torch.multinomial`` draws one sample the same way, but checks its input on the host
    first, which synchronises a GPU). Rows need not sum to 1; a row of zeros gives token 0."""
    races = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / races).argmax(dim=-1)


def next_token(logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None) -> torch.Tensor:
    """The token the `ar` baseline emits after ``logits`` (argmax, or a draw from the warped distribution)."""
    if sampling.is_greedy:
        return logits.argmax(dim=-1)
    return sample_from_probs(logits_to_probs(logits, sampling), generator)


def residual_distribution(target: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): what the target still owes after a draft token drawn from q is rejected.

    When nothing is left (p <= q everywhere, which makes a rejection impossible)
    the target distribution itself is returned.
    """
    left = (target - draft).clamp_min(0.0)
    total = left.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, left / total.clamp_min(torch.finfo(left.dtype).tiny), target)


def align_vocab(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Pad (with -inf) or cut a drafter's logits to the target's vocabulary size."""
    width = logits.shape[-1]
    if width == vocab_size:
        return logits
    if width > vocab_size:
        return logits[..., :vocab_size]
    pad = logits.new_full((*logits.shape[:-1], vocab_size - width), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


def make_generator(seed: int, device: torch.device | str) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator
