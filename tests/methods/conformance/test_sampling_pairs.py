"""The conformance suite's sampling check for hedgespec over each expert beside `pld` (see the package docstring); a
file of its own so that ``pytest -n N`` runs it beside the methods' sampling checks."""

from __future__ import annotations

import pytest

from tests.methods.conformance import (PARTNER, SAMPLING_PAIRS, SHARED, SHARED_COMMIT, Zoo,
                                        check_sampled_distribution)


@pytest.mark.parametrize("method", SAMPLING_PAIRS)
def test_sampled_distribution_equals_the_target(small_vocab_zoo: Zoo, method: str):
    check_sampled_distribution(small_vocab_zoo, method)


@pytest.mark.parametrize("method", SHARED)
def test_an_expert_left_out_commits_through_the_code_its_pair_checks(small_vocab_zoo: Zoo, method: str):
    """The experts without a sampling pair of their own (SHARED_COMMIT): their adapter is a subclass of the named
    expert's and keeps its ``commit``, which that expert's pair checks with grafted text."""
    own = type(small_vocab_zoo.build(method))
    shared = type(small_vocab_zoo.build(SHARED_COMMIT[method]))
    assert issubclass(own, shared) and own.commit is shared.commit
    assert f"hedgespec:{SHARED_COMMIT[method]},{PARTNER}" in SAMPLING_PAIRS
