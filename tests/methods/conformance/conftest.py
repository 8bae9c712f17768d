"""The 6-token zoo of the sampling checks, one per test file (``pytest -n N`` runs the files side by side)."""

from __future__ import annotations

import pytest

from tests.methods.conformance import Zoo, build_small_vocab_zoo


@pytest.fixture(scope="module")
def small_vocab_zoo(tmp_path_factory) -> Zoo:
    return build_small_vocab_zoo(tmp_path_factory.mktemp("conformance-sampling"))
