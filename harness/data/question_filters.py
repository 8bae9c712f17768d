"""Which training questions are kept: apart from the benchmark, well formed, and not a duplicate.

One selector (``QuestionSelector``) decides for every question a chat target's drafters learn from, whether a
shared data set holds it or the target wrote it (rule synth_questions), in the order they are offered:

- ``benchmark_turn``: it is a turn of a benchmark prompt (whitespace-normalised text);
- ``benchmark_8gram``: it shares a word 8-gram with a benchmark prompt (``words``: lower-case runs of letters and
  digits), so no benchmark question reaches training paraphrased around a long common span;
- ``duplicate_exact``: its words equal a kept question's (case, punctuation and spacing aside);
- ``duplicate_near``: the Jaccard similarity of its word 3-gram set to a kept question's is at least ``near``
  (an inverted index over 3-grams finds the kept questions that share one; a question of fewer than 3 words is
  compared by its word set).

A question written by the target is first checked for form (``form_problem``): ``unfinished`` (no end-of-turn token
within the limit), ``template_tokens`` (a special or added token of the tokenizer left in its text), ``empty``,
``too_short`` / ``too_long`` (words), ``language`` (fewer than ``min_ascii_letters`` of its letters are ASCII: the
mix kept is English and other Latin-script text, as the benchmark's prompts are) and ``repeated_lines`` (a
non-blank line written twice: a degenerate loop).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

WORD = re.compile(r"[^\W_]+")  # letters and digits, any script
BENCHMARK_NGRAM = 8
NEAR_NGRAM = 3


def normalised(text: str) -> str:
    """``text`` with its whitespace runs made one space: how a question is compared with a benchmark turn."""
    return " ".join(text.split())


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """The word ``n``-grams of ``text`` (none when it has fewer than ``n`` words)."""
    tokens = words(text)
    return {tuple(tokens[start:start + n]) for start in range(len(tokens) - n + 1)}


def shingles(text: str) -> set[tuple[str, ...]]:
    """What near duplicates are compared by: word 3-grams, or the words of a shorter text."""
    tokens = words(text)
    if len(tokens) < NEAR_NGRAM:
        return {(token,) for token in tokens}
    return word_ngrams(text, NEAR_NGRAM)


@dataclass(frozen=True)
class FormBounds:
    min_words: int = 3
    max_words: int = 200
    min_ascii_letters: float = 0.95


def form_problem(text: str, ended: bool, template_strings: Iterable[str], bounds: FormBounds) -> str | None:
    """Why a question the target wrote is not one (the reasons in the module docstring), or None."""
    if not ended:
        return "unfinished"
    if any(token and token in text for token in template_strings):
        return "template_tokens"
    count = len(words(text))
    if count == 0:
        return "empty"
    if count < bounds.min_words:
        return "too_short"
    if count > bounds.max_words:
        return "too_long"
    letters = [char for char in text if char.isalpha()]
    if letters and sum(char.isascii() for char in letters) < bounds.min_ascii_letters * len(letters):
        return "language"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(set(lines)) < len(lines):
        return "repeated_lines"
    return None


@dataclass
class QuestionSelector:
    """Keeps the questions offered to it that pass (module docstring), counting each drop by reason."""

    benchmark_turns: set[str]
    benchmark_grams: set[tuple[str, ...]]
    near: float = 0.5
    dropped: Counter = field(default_factory=Counter)
    _keys: set[str] = field(default_factory=set)
    _shingles: list[set] = field(default_factory=list)
    _index: dict[tuple[str, ...], list[int]] = field(default_factory=dict)

    def reason(self, text: str) -> str | None:
        """Why ``text`` would be dropped now, or None."""
        if normalised(text) in self.benchmark_turns:
            return "benchmark_turn"
        if word_ngrams(text, BENCHMARK_NGRAM) & self.benchmark_grams:
            return "benchmark_8gram"
        if " ".join(words(text)) in self._keys:
            return "duplicate_exact"
        grams = shingles(text)
        shared = Counter(kept for gram in grams for kept in self._index.get(gram, ()))  # kept -> grams in common
        if any(common >= self.near * (len(grams) + len(self._shingles[kept]) - common)
               for kept, common in shared.items()):
            return "duplicate_near"  # |A & B| / |A | B| >= near
        return None

    def offer(self, text: str) -> bool:
        """True (and ``text`` kept) when it passes; else its reason is counted."""
        reason = self.reason(text)
        if reason is not None:
            self.dropped[reason] += 1
            return False
        self._keys.add(" ".join(words(text)))
        grams = shingles(text)
        for gram in grams:
            self._index.setdefault(gram, []).append(len(self._shingles))
        self._shingles.append(grams)
        return True


def benchmark_selector(turns: Iterable[str], near: float) -> QuestionSelector:
    """A selector apart from the benchmark prompts' ``turns``."""
    turns = list(turns)
    grams = {gram for turn in turns for gram in word_ngrams(turn, BENCHMARK_NGRAM)}
    return QuestionSelector({normalised(turn) for turn in turns}, grams, near)


def shared_ngrams(texts: Iterable[str], benchmark_turns: Iterable[str], n: int = BENCHMARK_NGRAM) -> int:
    """How many of ``texts`` share a word ``n``-gram with a benchmark turn: the overlap check (0 expected)."""
    grams = {gram for turn in benchmark_turns for gram in word_ngrams(turn, n)}
    return sum(bool(word_ngrams(text, n) & grams) for text in texts)
