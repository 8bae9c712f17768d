"""STAND's logit n-gram store: n-gram context -> the target's top-k next-token distribution.

Each verify forward gives the target's distribution after every tree node; its top ``top_k`` entries are
merged into the store under the node's last n tokens for every n up to ``max_n``: the k-th revisit of a
context keeps ``k/(k+1)`` of the old distribution and adds ``1/(k+1)`` of the new one (STAND's rule), then
keeps the ``top_k`` largest. A lookup backs off from the longest context to the shortest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class StoredDistribution:
    """Tokens and their (unnormalised, top-k) probabilities, largest first, merged ``visits`` times."""

    tokens: list[int]
    probs: list[float]
    visits: int = 1


def merge_distributions(old: StoredDistribution, tokens: list[int], probs: list[float],
                        top_k: int) -> StoredDistribution:
    """The running mean of ``old`` (seen ``old.visits`` times) and a new top-k distribution, cut to ``top_k``."""
    visits = old.visits
    merged = {token: prob * visits / (visits + 1) for token, prob in zip(old.tokens, old.probs)}
    for token, prob in zip(tokens, probs):
        merged[token] = merged.get(token, 0.0) + prob / (visits + 1)
    best = sorted(merged.items(), key=lambda item: -item[1])[:top_k]
    return StoredDistribution([token for token, _ in best], [prob for _, prob in best], visits + 1)


class NgramDistributionStore:
    """The store (see the module docstring)."""

    def __init__(self, max_n: int, top_k: int) -> None:
        if max_n < 1 or top_k < 1:
            raise ValueError(f"an n-gram store needs max_n >= 1 and top_k >= 1, got {max_n} and {top_k}")
        self.max_n, self.top_k = max_n, top_k
        self.entries: dict[tuple[int, ...], StoredDistribution] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, context: list[int], tokens: list[int], probs: list[float]) -> None:
        """Merge the distribution observed after ``context`` under its last 1..max_n tokens."""
        for n in range(1, min(self.max_n, len(context)) + 1):
            key = tuple(context[-n:])
            old = self.entries.get(key)
            self.entries[key] = (StoredDistribution(list(tokens), list(probs)) if old is None
                                 else merge_distributions(old, tokens, probs, self.top_k))

    def lookup(self, context: list[int]) -> StoredDistribution | None:
        """The distribution stored under the longest suffix of ``context`` that has one."""
        for n in range(min(self.max_n, len(context)), 0, -1):
            found = self.entries.get(tuple(context[-n:]))
            if found is not None:
                return found
        return None


def top_k_rows(probs: torch.Tensor, k: int) -> tuple[list[list[int]], list[list[float]]]:
    """Per row of ``probs`` (n, V): its ``k`` most likely tokens and their probabilities, read in one go (one host
    read: token ids ride along as float64, exact below 2**53)."""
    values, indices = torch.topk(probs.float(), min(k, probs.shape[-1]), dim=-1)
    both = torch.stack([indices.double(), values.double()]).tolist()
    return [[int(token) for token in row] for row in both[0]], [[float(value) for value in row] for row in both[1]]


class GumbelNoise:
    """Gumbel(0, 1) samples drawn in blocks from the run's generator and handed out once each (STAND
    precomputes its noise; a fresh block is drawn when one runs out)."""

    def __init__(self, block: int = 4096) -> None:
        self.block = block
        self.values: list[float] = []
        self.used = 0  # values handed out from the current block

    def reset(self) -> None:
        self.values, self.used = [], 0

    def take(self, count: int, generator: torch.Generator | None) -> list[float]:
        if self.used + count > len(self.values):  # the rest of the block, then as many fresh blocks as needed
            left = self.values[self.used :]
            device = generator.device if generator is not None else "cpu"
            while len(left) < count:
                uniform = torch.rand(self.block, generator=generator, device=device, dtype=torch.float64)
                left.extend((-torch.log(-torch.log(uniform.clamp(1e-300, 1.0 - 1e-16)))).tolist())
            self.values, self.used = left, 0
        taken = self.values[self.used : self.used + count]
        self.used += count
        return taken


def gumbel_top_k(probs: list[float], count: int, noise: list[float]) -> list[int]:
    """Indices of ``count`` draws without replacement from ``probs`` (normalised or not): the largest
    ``log p + Gumbel`` scores; zero-probability entries are never drawn."""
    scores = [math.log(p) + g if p > 0 else -math.inf for p, g in zip(probs, noise)]
    order = sorted(range(len(probs)), key=lambda i: -scores[i])
    return [i for i in order[:count] if scores[i] > -math.inf]
