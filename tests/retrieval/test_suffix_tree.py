"""The suffix trees of `suffix` (Suffix Decoding): counts equal a brute-force count of occurrences, removal undoes an
insertion, and speculation follows the paper's rules (frequency-estimated probabilities, a budget growing with the
match, a probability floor, the better of the request's and the global tree)."""

from __future__ import annotations

import random

import pytest

from harness.retrieval.suffix_tree import SpeculationLimits, SuffixCache, SuffixTree


def occurrences(sequences: list[list[int]], pattern: list[int]) -> int:
    n = len(pattern)
    return sum(1 for seq in sequences for start in range(len(seq) - n + 1) if seq[start:start + n] == pattern)


def structure(tree: SuffixTree) -> dict[tuple[int, ...], int]:
    """Every node's path -> its count."""
    found, stack = {}, [((), tree.root)]
    while stack:
        path, node = stack.pop()
        found[path] = node.count
        stack.extend(((*path, token), child) for token, child in node.children.items())
    return found


def random_sequences(seed: int, count: int = 4, length: int = 30, vocab: int = 4) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(count)]


@pytest.mark.parametrize("seed", [0, 1])
def test_every_node_counts_the_occurrences_of_its_path(seed):
    sequences, depth = random_sequences(seed), 5
    tree = SuffixTree(depth)
    for index, sequence in enumerate(sequences):
        for token in sequence:  # appended token by token, the sequences' growth interleaved as a run's would be
            tree.append(index, token)
    nodes = structure(tree)
    assert nodes[()] == sum(len(seq) for seq in sequences)
    assert max(len(path) for path in nodes) == depth
    for path, count in nodes.items():
        if path:
            assert count == occurrences(sequences, list(path)), path
    assert all(occurrences(sequences, [a, b, c]) == (nodes.get((a, b, c)) or 0)
               for a in range(4) for b in range(4) for c in range(4))


def test_removing_a_sequence_leaves_the_tree_of_the_others():
    sequences = random_sequences(2)
    both, others = SuffixTree(6), SuffixTree(6)
    for index, sequence in enumerate(sequences):
        both.extend(index, sequence)
        if index != 1:
            others.extend(index, sequence)
    both.remove(1)
    assert structure(both) == structure(others) and 1 not in both.sequences


def test_a_tree_speculation_is_best_first_by_estimated_probability_under_the_floor_and_budget():
    tree = SuffixTree(8)
    tree.extend(0, [7, 1, 2, 7, 1, 2, 7, 1, 3, 7, 1, 2, 5])  # after "7 1": 2 three times, 3 once
    draft = tree.speculate([9, 7, 1], SpeculationLimits(max_tokens=8, factor=2.0, min_token_prob=0.2))
    node = tree.match([7, 1])
    assert draft.match_len == 2 and draft.tokens[:2] == [2, 7] and draft.parents[:2] == [-1, 0]
    assert draft.probs[0] == pytest.approx(node.children[2].count / node.count)
    assert all(prob >= 0.2 for prob in draft.probs) and len(draft.tokens) <= 4  # 2 matched tokens x factor 2
    assert draft.probs == sorted(draft.probs, reverse=True)  # best first
    assert all(parent < index for index, parent in enumerate(draft.parents))
    assert 3 in draft.tokens and draft.parents[draft.tokens.index(3)] == -1  # the sibling, 1/4 >= 0.2


def test_a_path_speculation_follows_the_most_frequent_child():
    tree = SuffixTree(8)
    tree.extend(0, [7, 1, 2, 7, 1, 2, 7, 1, 3, 7, 1, 2, 5])
    draft = tree.speculate([7, 1], SpeculationLimits(max_tokens=8, factor=4.0, min_token_prob=0.0, tree=False))
    assert draft.parents == list(range(-1, len(draft.tokens) - 1)) and draft.tokens[:3] == [2, 7, 1]


def test_the_budget_grows_with_the_match_and_no_match_drafts_nothing():
    tree = SuffixTree(12)
    tree.extend(0, list(range(10)) * 2)
    short = tree.speculate([42, 5], SpeculationLimits(max_tokens=12))
    long = tree.speculate([3, 4, 5], SpeculationLimits(max_tokens=12))
    assert short.match_len == 1 and short.tokens == [6]
    assert long.match_len == 3 and long.tokens == [6, 7, 8]
    assert tree.speculate([42], SpeculationLimits()).tokens == []


def test_the_cache_drafts_from_earlier_outputs_and_evicts_the_oldest():
    cache = SuffixCache(max_depth=8, max_cached_requests=2)
    limits = SpeculationLimits(max_tokens=8, factor=2.0)
    cache.start_request([1, 2], [3, 4, 5, 6], cached=True)
    cache.start_request([9, 9], [], cached=False)  # a warm-up: not cached
    draft, source = cache.speculate([9, 9, 3, 4], limits)
    assert source == "global" and draft.tokens[:2] == [5, 6]
    cache.start_request([8], [20, 21], cached=True)
    cache.start_request([8], [30, 31], cached=True)  # the third cached request evicts the first
    assert list(cache.cached) == [1, 2]
    assert cache.speculate([3, 4], limits)[0].tokens == []
    cache.add_output([32])
    assert cache.speculate([31], limits)[0].tokens == [32]  # the active request's output is in its own tree


def test_no_global_tree_when_nothing_is_cached():
    cache = SuffixCache(max_depth=8, max_cached_requests=0)
    cache.start_request([1, 2], [3, 4, 5], cached=True)
    cache.start_request([7], [], cached=True)
    assert not cache.cached and cache.speculate([3, 4], SpeculationLimits())[0].tokens == []
