"""Prompt lookup over the current context: the latest earlier occurrence of the sequence's last n tokens.

The index is built incrementally as the sequence grows (one dict entry per n-gram length per token), so a
lookup costs O(max_n) whatever the context length. It serves `pld` (its whole drafter) and `reader` (the
short-term, in-context half of its retrieval).
"""

from __future__ import annotations

from dataclasses import dataclass



@dataclass(frozen=True)
class Match:
    """A continuation found in the context: the tokens that followed the latest earlier occurrence of the
    sequence's last ``ngram`` tokens."""

    tokens: list[int]
    ngram: int


class ContextIndex:
    """n-grams (``min_n`` <= n <= ``max_n``) of a growing token sequence -> where each last ended."""

    def __init__(self, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"n-gram range needs 1 <= min_n <= max_n, got {min_n}..{max_n}")
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self.last_end: dict[tuple[int, ...], int] = {}
        self.indexed = 0  # n-grams ending before this position are in last_end

    def reset(self) -> None:
        self.tokens, self.last_end, self.indexed = [], {}, 0

    def extend(self, tokens: list[int]) -> None:
        """Append tokens to the sequence. The n-grams ending at the newest token stay out of the index, so a
        lookup never matches the suffix with itself."""
        self.tokens.extend(tokens)
        for end in range(self.indexed, len(self.tokens) - 1):
            for n in range(self.min_n, min(self.max_n, end + 1) + 1):
                self.last_end[tuple(self.tokens[end - n + 1 : end + 1])] = end
        self.indexed = max(self.indexed, len(self.tokens) - 1)

    def sync(self, tokens: list[int]) -> None:
        """Extend the index by the tokens of ``tokens`` (the sequence so far, on the host: ``StepContext.tokens``)
        it has not seen."""
        self.extend(tokens[len(self.tokens):])

    def continuation(self, max_tokens: int, tail: list[int] | None = None) -> Match | None:
        """The tokens after the latest earlier occurrence of the longest matching suffix of the sequence (plus
        ``tail``, tokens drafted beyond it), at most ``max_tokens``; None if no n-gram of the range recurs."""
        sequence = self.tokens if not tail else self.tokens + tail
        for n in range(min(self.max_n, len(sequence)), self.min_n - 1, -1):
            end = self.last_end.get(tuple(sequence[-n:]))
            if end is not None:
                following = sequence[end + 1 : end + 1 + max_tokens]
                if following:
                    return Match(following, n)
        return None
