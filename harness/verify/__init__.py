"""Verification: the verdict type, lossless sampling helpers, and the table of verifiers.

A verifier takes (tree, target logits (n, V), sampling, generator) and returns a ``Verdict``. ``VERIFIERS`` names
every verifier a run may select; ``token_level`` (greedy / multi-draft speculative sampling, node by node) is the
default; ``traversal`` (Traversal Verification: leaf-to-root, sequence-level acceptance) tests whole paths. A new
verifier is one module in this package and one entry below.
"""

from __future__ import annotations

from harness.errors import DraftcountError
from harness.verify.token_level import verify_tree
from harness.verify.traversal import verify_traversal
from harness.verify.verdict import Verdict, Verifier

DEFAULT_VERIFIER = "token_level"
VERIFIERS: dict[str, Verifier] = {
    "token_level": verify_tree,
    "traversal": verify_traversal,
}


def get_verifier(name: str) -> Verifier:
    """The verifier registered as ``name``; a one-line error naming the known ones otherwise."""
    if name not in VERIFIERS:
        raise DraftcountError(f"unknown verifier {name!r}; known verifiers: {', '.join(sorted(VERIFIERS))}")
    return VERIFIERS[name]


__all__ = ["DEFAULT_VERIFIER", "VERIFIERS", "Verdict", "Verifier", "get_verifier", "verify_traversal", "verify_tree"]
