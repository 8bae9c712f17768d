import numpy as np
import pytest

from harness.errors import DraftcountError
from harness.retrieval.datastore import build_datastore, load_datastore, save_datastore


def test_occurrences_equal_a_brute_force_search(tmp_path):
    tokens = np.random.default_rng(0).integers(0, 5, 400)
    store = build_datastore(tokens, key_len=3, source="random")
    save_datastore(tmp_path / "store.pt", store)
    store = load_datastore(tmp_path / "store.pt")
    for pattern in [(1,), (2, 3), (4, 4, 0), (0, 1, 2)]:
        lo, hi = store.occurrences(pattern)
        found = sorted(store.order[lo:hi].tolist())
        expected = [i for i in range(len(tokens)) if tuple(tokens[i:i + len(pattern)].tolist()) == pattern]
        assert found == expected


def test_continuations_are_the_most_frequent_first():
    tokens = np.array([1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 4, 9, 7])
    store = build_datastore(tokens, key_len=2, source="toy")
    assert store.continuations([8, 1, 2], min_n=1, depth=2, width=2) == [[3, 9], [4, 9]]
    assert store.continuations([6, 6], min_n=1, depth=2, width=2) == []


def test_a_missing_or_foreign_file_is_one_line(tmp_path):
    with pytest.raises(DraftcountError, match="does not exist"):
        load_datastore(tmp_path / "none.pt")
    (tmp_path / "x.pt").write_bytes(b"not a datastore")
    with pytest.raises(Exception):
        load_datastore(tmp_path / "x.pt")
