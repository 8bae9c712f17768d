"""The conformance suite's sampling check for every catalog method (see the package docstring)."""

from __future__ import annotations

import pytest

from tests.methods.conformance import (
    BATCHED, METHODS, SAMPLED_VOCAB, Zoo, check_batch_row_distribution, check_sampled_distribution,
)


@pytest.mark.parametrize("method", [*METHODS, *SAMPLED_VOCAB])
def test_sampled_distribution_equals_the_target(small_vocab_zoo: Zoo, method: str):
    check_sampled_distribution(small_vocab_zoo, method)


@pytest.mark.skipif("dflash" not in METHODS, reason="dflash is not among the selected methods")
def test_a_cut_dflash_chain_follows_the_target(small_vocab_zoo: Zoo):
    """dflash verifying 2 of its block's drafts (its LM head skips the rest): the residual after a rejection is
    taken against the verified drafts only."""
    check_sampled_distribution(small_vocab_zoo, "dflash", {"verify_length": "2"})


# The heads' other drafting convention (default: top-k, q = 1): children sampled without replacement, carrying their
# q (harness.trees.beam). Two representative heads (the suite is near its time limit): eagle's adapter drafts for
# prism, mtp and dream (subclasses that keep its beam), lyanna's has a beam of its own; medusa and owl share the
# beam code they call (tests/trees/test_beam.py checks the sampled tree on its own).
SAMPLED_DRAFTS = [method for method in ("eagle", "lyanna") if method in METHODS]


@pytest.mark.parametrize("method", SAMPLED_DRAFTS)
def test_sampled_drafts_follow_the_target(small_vocab_zoo: Zoo, method: str):
    check_sampled_distribution(small_vocab_zoo, method, {"drafts": "sampled", "top_k": "3", "depth": "3",
                                                         "budget": "8"})


@pytest.mark.parametrize("method", BATCHED)
def test_a_batch_row_follows_the_target(small_vocab_zoo: Zoo, method: str):
    check_batch_row_distribution(small_vocab_zoo, method)
