"""Static trees from tree choices: Medusa's layout (sorted by length then path, parents before children, each
depth's parents and ranks), the calibrated tree equal to the best paths by estimated acceptance found by brute force,
and one-line errors for a malformed choice set."""

import itertools
import json
import random

import pytest

from harness.errors import DraftcountError
from harness.trees.choices import calibrated_choices, choice_tree, read_choices
from harness.trees.tree import depths_of


def test_a_choice_set_is_laid_out_as_medusa_lays_it_out():
    tree = choice_tree([(1, 0), (0,), (0, 1), (1,), (0, 0), (0, 0, 2)])
    assert tree.choices == ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 2))
    assert tree.parents == (-1, 0, 0, 1, 1, 2, 3)
    assert depths_of(tree.parents) == (0, 1, 1, 2, 2, 2, 3)
    first, second, third = tree.levels
    assert (first.parent_nodes, first.child_rows, first.ranks) == ((0,), (0, 0), (0, 1))
    assert (second.parent_nodes, second.child_rows, second.ranks, second.top) == ((1, 2), (0, 0, 1), (0, 1, 0), 2)
    assert (third.parent_nodes, third.ranks, third.top) == ((3,), (2,), 3)
    assert tree.nodes == 6 and tree.depth == 3


def _estimate(accuracy, path):
    product = 1.0
    for depth, rank in enumerate(path):
        product *= accuracy[depth][rank]
    return product


@pytest.mark.parametrize("seed", range(4))
def test_the_calibrated_tree_holds_the_best_paths_by_estimated_acceptance(seed):
    rng = random.Random(seed)
    ranks, depth = 4, 3
    accuracy = [sorted((rng.random() * 0.9 ** d for _ in range(ranks)), reverse=seed % 2 == 0)
                for d in range(depth)]  # odd seeds: accuracies that rise with rank (rank order is no shortcut)
    everything = [path for length in range(1, depth + 1) for path in itertools.product(range(ranks), repeat=length)]
    for nodes in (1, 5, 20, len(everything)):
        tree = calibrated_choices(accuracy, nodes, depth)
        best = sorted(everything, key=lambda path: (-_estimate(accuracy, path), len(path), path))[:nodes]
        assert set(tree.choices) == set(best)
        assert all(len(path) == 1 or path[:-1] in set(tree.choices) for path in tree.choices)
    assert max(map(len, calibrated_choices(accuracy, 30, 2).choices)) == 2


def test_a_malformed_choice_set_is_one_line(tmp_path):
    cases = {"has no parent choice \\[0\\]": [[0, 1]], "listed twice": [[0], [0]],
             "ranks >= 0": [[0], [-1]], "no choices": []}
    for message, choices in cases.items():
        path = tmp_path / "choices.json"
        path.write_text(json.dumps(choices))
        with pytest.raises(DraftcountError, match=message) as error:
            read_choices(path)
        assert "\n" not in str(error.value)
    (tmp_path / "flat.json").write_text("[0, 1]")
    with pytest.raises(DraftcountError, match="list of rank lists"):
        read_choices(tmp_path / "flat.json")
    with pytest.raises(DraftcountError, match="no tree-choices file"):
        read_choices(tmp_path / "missing.json")
    assert read_choices(_written(tmp_path, [[0], [1], [0, 0]])).parents == (-1, 0, 0, 1)


def _written(tmp_path, choices):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(choices))
    return path
