"""READER's long-term datastore: a corpus of token ids with its suffixes sorted on their first ``key_len``
tokens (a truncated suffix array), so every occurrence of an n-gram (n <= key_len) is one binary search away.

Built once by ``python -m harness build-datastore`` (the workflow's rule ``reader_datastore``) from a token
stream (the zoo's training split by default) or any text/JSONL file, and saved as one file, atomically.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from harness.errors import DraftcountError
from harness.store.atomic import atomic_path

FORMAT = "draftcount-datastore-1"


@dataclass(frozen=True)
class Datastore:
    tokens: np.ndarray  # (N,) int32: the corpus
    order: np.ndarray  # (N,) int64: corpus positions sorted by their next key_len tokens
    key_len: int
    source: str

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def _compare(self, position: int, pattern: tuple[int, ...]) -> int:
        """-1, 0 or 1: the corpus at ``position`` (its first len(pattern) tokens) against ``pattern``."""
        window = tuple(self.tokens[position : position + len(pattern)].tolist())
        return (window > pattern) - (window < pattern)

    def occurrences(self, pattern: tuple[int, ...]) -> tuple[int, int]:
        """The range [lo, hi) of ``order`` whose positions start with ``pattern`` (len(pattern) <= key_len)."""
        pattern = tuple(int(token) for token in pattern)
        def bound(strict: bool) -> int:
            lo, hi = 0, len(self)
            while lo < hi:
                middle = (lo + hi) // 2
                side = self._compare(int(self.order[middle]), pattern)
                if side < 0 or (strict and side == 0):
                    lo = middle + 1
                else:
                    hi = middle
            return lo
        return bound(False), bound(True)

    def continuations(self, context: list[int], min_n: int, depth: int, width: int,
                      max_matches: int = 64) -> list[list[int]]:
        """Up to ``width`` distinct continuations of ``depth`` tokens after the longest suffix of ``context``
        (at least ``min_n`` tokens) found in the corpus, the most frequent first (among the first
        ``max_matches`` occurrences in suffix order)."""
        for n in range(min(self.key_len, len(context)), min_n - 1, -1):
            lo, hi = self.occurrences(tuple(context[-n:]))
            if lo == hi:
                continue
            counts: Counter[tuple[int, ...]] = Counter()
            for position in self.order[lo : min(hi, lo + max_matches)].tolist():
                following = tuple(self.tokens[position + n : position + n + depth].tolist())
                if following:
                    counts[following] += 1
            return [list(tokens) for tokens, _ in counts.most_common(width)]
        return []


def build_datastore(tokens: np.ndarray, key_len: int, source: str) -> Datastore:
    """Sort every corpus position by its next ``key_len`` tokens (positions near the end are padded low)."""
    if key_len < 1:
        raise DraftcountError(f"a datastore needs key_len >= 1, got {key_len}")
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    padded = np.concatenate([tokens.astype(np.int64), np.full(key_len, -1, dtype=np.int64)])
    keys = [padded[offset : offset + len(tokens)] for offset in range(key_len)]
    order = np.lexsort(keys[::-1])  # lexsort sorts by the last key first
    return Datastore(tokens, order.astype(np.int64), key_len, source)


def corpus_tokens(path: Path | str, tokenizer_dir: str | None) -> np.ndarray:
    """The token ids of a corpus: a token stream (.pt, as the zoo writes), or text (.jsonl with a "text"
    field per line, or any plain-text file) encoded with the tokenizer in ``tokenizer_dir``."""
    file = Path(path)
    if not file.is_file():
        raise DraftcountError(f"datastore source {path} does not exist")
    if file.suffix == ".pt":
        return torch.load(file, map_location="cpu", weights_only=True).numpy()
    if tokenizer_dir is None:
        raise DraftcountError(f"a text source ({path}) needs --tokenizer (the target's directory)")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if file.suffix == ".jsonl":
        texts = []
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                record = json.loads(line)
                if "text" not in record:
                    raise DraftcountError(f"{path} line {number} has no 'text' field")
                texts.append(record["text"])
    else:
        texts = [file.read_text(encoding="utf-8")]
    ids = [token for text in texts for token in tokenizer(text, add_special_tokens=False)["input_ids"]]
    return np.asarray(ids, dtype=np.int32)


def save_datastore(path: Path | str, store: Datastore) -> None:
    with atomic_path(path) as partial:
        torch.save({"format": FORMAT, "tokens": torch.from_numpy(store.tokens),
                    "order": torch.from_numpy(store.order), "key_len": store.key_len, "source": store.source},
                   partial)


def load_datastore(path: Path | str) -> Datastore:
    file = Path(path)
    if not file.is_file():
        raise DraftcountError(f"datastore {path} does not exist (build it with `python -m harness build-datastore`)")
    data = torch.load(file, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DraftcountError(f"{path} is not a draftcount datastore")
    return Datastore(data["tokens"].numpy(), data["order"].numpy(), int(data["key_len"]), str(data["source"]))
