"""The conformance suite's sampling check for hedgespec over each expert beside `pld` (see the package docstring); a
file of its own so that ``pytest -n N`` runs it beside the methods' sampling checks."""

from __future__ import annotations

import pytest

from tests.methods.conformance import SAMPLING_PAIRS, Zoo, check_sampled_distribution


@pytest.mark.parametrize("method", SAMPLING_PAIRS)
def test_sampled_distribution_equals_the_target(small_vocab_zoo: Zoo, method: str):
    check_sampled_distribution(small_vocab_zoo, method)
