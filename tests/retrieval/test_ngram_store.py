from collections import Counter

import pytest
import torch

from harness.retrieval.ngram_store import (
    GumbelNoise, NgramDistributionStore, StoredDistribution, gumbel_top_k, merge_distributions, top_k_rows,
)


def test_kth_revisit_keeps_k_over_k_plus_one_of_the_old_distribution():
    merged = merge_distributions(StoredDistribution([1, 2], [0.6, 0.4], visits=3), [2, 3], [0.8, 0.2], top_k=3)
    assert merged.visits == 4
    assert dict(zip(merged.tokens, merged.probs)) == pytest.approx({1: 0.45, 2: 0.5, 3: 0.05})
    assert merged.tokens == [2, 1, 3]  # largest first


def test_merge_keeps_only_the_top_k():
    merged = merge_distributions(StoredDistribution([1, 2], [0.5, 0.5]), [3], [1.0], top_k=2)
    assert len(merged.tokens) == 2 and merged.tokens[0] == 3


def test_lookup_backs_off_to_the_longest_known_suffix():
    store = NgramDistributionStore(max_n=3, top_k=4)
    store.add([7, 8, 9], [1], [1.0])
    store.add([5, 9], [2], [1.0])
    assert store.lookup([1, 8, 9]).tokens == [1]  # "8 9" was stored by the first add
    assert sorted(store.lookup([4, 4, 9]).tokens) == [1, 2]  # only "9" is known: both adds merged under it
    assert store.lookup([4, 4, 4]) is None


def test_gumbel_top_k_draws_without_replacement_in_proportion():
    probs = [0.5, 0.3, 0.2, 0.0]
    noise = GumbelNoise(block=1000)
    generator = torch.Generator().manual_seed(0)
    firsts, pairs = Counter(), Counter()
    for _ in range(20000):
        picks = gumbel_top_k(probs, 2, noise.take(4, generator))
        assert 3 not in picks and len(set(picks)) == 2
        firsts[picks[0]] += 1
        pairs[tuple(picks)] += 1
    assert firsts[0] / 20000 == pytest.approx(0.5, abs=0.015)
    assert pairs[(1, 0)] / 20000 == pytest.approx(0.3 * 0.5 / 0.7, abs=0.015)  # second draw from q without 1


def test_top_k_rows_reads_each_row():
    tokens, probs = top_k_rows(torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.2, 0.3]]), 2)
    assert tokens == [[1, 2], [0, 2]] and probs[1] == pytest.approx([0.5, 0.3])
