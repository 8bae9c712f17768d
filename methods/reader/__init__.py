"""`reader`: retrieval-assisted drafting (READER, Divilkovskiy et al. 2025, arXiv 2508.09072).

The tree of a neural drafter (an EAGLE head given as ``head``: EAGLE-2 dynamic trees, as the paper reuses a
trained speculator; none: the root alone) is extended with retrieved continuations: the tokens that followed the
latest earlier occurrence of the sequence's last n tokens in the context (the short-term, in-context half) and
the ``width`` most frequent continuations of its longest suffix found in a corpus ``datastore`` (the long-term
half: a suffix array over the zoo's training text by default, `python -m harness build-datastore`). Each
retrieved chain is grafted from the root: it follows the tree's nodes while their tokens agree and hangs its
remaining tokens below, as deep as ``depth`` (tree deepening). Retrieved tokens are deterministic drafts
(q = 1 on the token), so verification stays lossless at any temperature; they cost no drafter FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError


@dataclass(frozen=True)
class ReaderOptions:
    min_n: int = 1  # shortest suffix matched (context and datastore)
    max_n: int = 4  # longest suffix matched in the context (the datastore's key length caps its own)
    depth: int = 8  # tokens per retrieved chain
    width: int = 2  # datastore continuations grafted per step
    datastore: str = ""  # a datastore file; empty: in-context retrieval only
    head: str = ""  # an EAGLE drafter directory whose trees are extended; empty: retrieval alone
    head_top_k: int = 4
    head_depth: int = 5
    head_budget: int = 24

    def __post_init__(self) -> None:
        if not 1 <= self.min_n <= self.max_n or self.depth < 1 or self.width < 0:
            raise DraftcountError(f"method 'reader' needs 1 <= min_n <= max_n, depth >= 1 and width >= 0, got "
                                  f"min_n={self.min_n} max_n={self.max_n} depth={self.depth} width={self.width}")
