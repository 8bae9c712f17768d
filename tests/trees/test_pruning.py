import pytest

from harness.trees.pruning import prune_to_most_accepted


def test_keeps_the_most_accepted_nodes_closed_under_ancestors():
    #        0
    #      1    2
    #     3 4    5
    #     6
    parents = (-1, 0, 0, 1, 1, 2, 3)
    accepted = [0, 90, 30, 60, 10, 25, 40]
    assert prune_to_most_accepted(parents, accepted, 4) == (-1, 0, 0, 1, 3)  # nodes 1, 2, 3, 6
    assert prune_to_most_accepted(parents, accepted, 2) == (-1, 0, 1)  # nodes 1, 3


def test_never_accepted_nodes_are_dropped_and_counts_must_match():
    assert prune_to_most_accepted((-1, 0, 1), [0, 5, 0], 10) == (-1, 0)
    with pytest.raises(ValueError):
        prune_to_most_accepted((-1, 0), [1], 1)
