"""What a verifier returns, and the signature every verifier has."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """What verification decided.

    path: accepted node indices from the root (root included), so
        ``len(path) - 1`` draft tokens were accepted.
    accepted_tokens: the tokens of path[1:].
    bonus_token: the token the target adds after the last accepted node.
    tried: draft nodes whose acceptance test ran (for waste accounting).
    """

    path: tuple[int, ...]
    accepted_tokens: tuple[int, ...]
    bonus_token: int
    tried: int

    @property
    def num_accepted(self) -> int:
        return len(self.path) - 1

    @property
    def new_tokens(self) -> tuple[int, ...]:
        return (*self.accepted_tokens, self.bonus_token)


Verifier = Callable[..., Verdict]


def check_one_row_per_node(tree, logits) -> None:
    """Every verifier's input check: the target's logits have one row per tree node."""
    if logits.shape[0] != tree.size:
        raise ValueError(f"need one row of logits per tree node ({tree.size}), got {logits.shape[0]}")
