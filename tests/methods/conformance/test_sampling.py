"""The conformance suite's sampling check for every catalog method (see the package docstring)."""

from __future__ import annotations

import pytest

from tests.methods.conformance import METHODS, Zoo, check_sampled_distribution


@pytest.mark.parametrize("method", METHODS)
def test_sampled_distribution_equals_the_target(small_vocab_zoo: Zoo, method: str):
    check_sampled_distribution(small_vocab_zoo, method)
