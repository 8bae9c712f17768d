"""Long-context prompts cut from held-out source files, in buckets of target-token length (OWL's evaluation,
scaled to the zoo's context).

A prompt of bucket L is the longest run of whole lines of one held-out document, from a line chosen at random
(or the first line when too little follows it), whose token count (as the run encodes it: the plain template,
the tokenizer's special tokens included) is at most L, and at least ``(1 - tolerance) * L``. The model's job is
to continue the file. Prompts use the code prompts' file format; the bucket is their category (``ctx<L>``, so
the per-category table reads them) and their exact token count is recorded as ``prompt_tokens``. The choice is
deterministic for a seed: documents in path order, shuffled by a generator seeded per bucket.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from harness.data.corpus import Document, load_documents
from harness.errors import DraftcountError
from harness.store.atomic import atomic_path

DEFAULT_BUCKETS = (128, 256, 512, 896)
CATEGORY_PREFIX = "ctx"  # harness.analysis.context_length reads the bucket back from it


def bucket_category(bucket: int) -> str:
    return f"{CATEGORY_PREFIX}{bucket}"


def check_buckets(buckets: list[int], context: int | None = None, new_tokens: int = 0) -> list[int]:
    """The buckets sorted; an error unless each is >= 8, distinct, and (given ``context``) leaves room for
    ``new_tokens``."""
    ordered = sorted(int(bucket) for bucket in buckets)
    if not ordered or ordered[0] < 8 or len(set(ordered)) != len(ordered):
        raise DraftcountError(f"long-context buckets must be distinct token counts >= 8, got {list(buckets)}")
    if context is not None and ordered[-1] + new_tokens > context:
        raise DraftcountError(f"long-context bucket {ordered[-1]} + {new_tokens} new tokens exceeds the "
                              f"target's context of {context} tokens")
    return ordered


def token_count(tokenizer: PreTrainedTokenizerBase, text: str) -> int:
    """Tokens of ``text`` as a run encodes a plain-text prompt (``encode_turn``: special tokens included)."""
    return len(tokenizer(text)["input_ids"])


def longest_cut(tokenizer: PreTrainedTokenizerBase, lines: list[str], start: int, limit: int) -> tuple[str, int]:
    """The most whole lines from ``start`` whose text has at most ``limit`` tokens (binary search on the line
    count), and its token count; ("", 0) when not even one line fits."""
    low, high, best = 1, len(lines) - start, ("", 0)
    while low <= high:
        middle = (low + high) // 2
        text = "".join(lines[start : start + middle])
        count = token_count(tokenizer, text)
        if count <= limit:
            best, low = (text, count), middle + 1
        else:
            high = middle - 1
    return best


def cut_document(tokenizer: PreTrainedTokenizerBase, document: Document, bucket: int, tolerance: float,
                 rng: random.Random) -> tuple[int, str, int] | None:
    """(start line, text, tokens) of a prompt of ``bucket`` from ``document``, or None if it has too little."""
    lines = document.text.splitlines(keepends=True)
    floor = (1 - tolerance) * bucket
    for start in dict.fromkeys([rng.randrange(len(lines)), 0]):
        text, count = longest_cut(tokenizer, lines, start, bucket)
        if count >= floor and text.strip():
            return start, text, count
    return None


def make_long_prompts(documents: list[Document], tokenizer: PreTrainedTokenizerBase, buckets: list[int],
                      per_bucket: int, seed: int, tolerance: float = 0.1) -> list[dict]:
    """``per_bucket`` prompts of each bucket, each from a different document (see the module docstring)."""
    if per_bucket < 1 or not 0 <= tolerance < 1:
        raise DraftcountError(f"long-context prompts need per_bucket >= 1 and 0 <= tolerance < 1, got "
                              f"{per_bucket} and {tolerance}")
    ordered = sorted(documents, key=lambda document: document.path)
    prompts = []
    for bucket in check_buckets(buckets):
        rng = random.Random(f"{seed}:{bucket}")
        candidates = ordered[:]
        rng.shuffle(candidates)
        chosen = []
        for document in candidates:
            cut = cut_document(tokenizer, document, bucket, tolerance, rng)
            if cut is not None:
                start, text, count = cut
                chosen.append({"id": f"{document.path}:{start + 1}@{bucket}", "category": bucket_category(bucket),
                               "prompt": text, "prompt_tokens": count, "bucket": bucket})
            if len(chosen) == per_bucket:
                break
        if len(chosen) < per_bucket:
            raise DraftcountError(f"only {len(chosen)} held-out documents hold a {bucket}-token prompt, "
                                  f"{per_bucket} asked")
        prompts += chosen
    return prompts


def write_long_prompts(heldout: Path, tokenizer_dir: Path, out: Path, buckets: list[int], per_bucket: int,
                       seed: int, tolerance: float = 0.1) -> int:
    """The long-context prompt set of the documents in ``heldout`` (JSON lines), written to ``out``."""
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    prompts = make_long_prompts(load_documents(heldout), tokenizer, buckets, per_bucket, seed, tolerance)
    with atomic_path(out) as partial:
        partial.write_text("".join(json.dumps(prompt) + "\n" for prompt in prompts))
    return len(prompts)
