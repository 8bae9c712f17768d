"""The 6-token zoo of the sampling checks, one per test file (``pytest -n N`` runs the files side by side), and the
narrowed suite: under ``DRAFTCOUNT_CONFORMANCE_METHODS`` only the checks of the selected methods run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.methods.conformance import SELECTION, Zoo, build_small_vocab_zoo

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With a selection, this folder's tests that check no selected method are deselected: those without a ``method``
    parameter (the VLM target's own properties, HiViS, the hybrid's batch refusal) and a check's empty list (a check
    of methods named in it, as the hybrid's sampling of sd, tree_sd and eagle, none of them selected)."""
    if not os.environ.get(SELECTION):
        return
    general = [item for item in items if HERE in item.path.parents
               and not isinstance(getattr(getattr(item, "callspec", None), "params", {}).get("method"), str)]
    if general:
        config.hook.pytest_deselected(items=general)
        left_out = {id(item) for item in general}
        items[:] = [item for item in items if id(item) not in left_out]


@pytest.fixture(scope="module")
def small_vocab_zoo(tmp_path_factory) -> Zoo:
    return build_small_vocab_zoo(tmp_path_factory.mktemp("conformance-sampling"))
