import pytest

from harness.retrieval.context_index import ContextIndex


def test_latest_earlier_occurrence_of_the_longest_suffix():
    index = ContextIndex(1, 3)
    index.extend([5, 6, 7, 8, 1, 6, 7, 9, 2, 6, 7])
    match = index.continuation(4)
    assert match.ngram == 2 and match.tokens == [9, 2, 6, 7]  # "6 7" last seen before the end at position 6


def test_the_suffix_never_matches_itself_and_no_recurrence_is_none():
    index = ContextIndex(1, 2)
    index.extend([1, 2, 3])
    assert index.continuation(4) is None
    index.extend([2])
    assert index.continuation(4).tokens == [3, 2]


def test_incremental_extension_equals_one_shot():
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5]
    one = ContextIndex(1, 3)
    one.extend(tokens)
    step = ContextIndex(1, 3)
    for token in tokens:
        step.extend([token])
    assert one.last_end == step.last_end and one.continuation(5) == step.continuation(5)


def test_a_tail_drafted_beyond_the_sequence_is_matched_too():
    index = ContextIndex(1, 2)
    index.extend([4, 5, 6, 7, 4])
    assert index.continuation(3, tail=[5]).tokens == [6, 7, 4]


def test_bad_range_is_refused():
    with pytest.raises(ValueError, match="min_n"):
        ContextIndex(3, 2)
