"""`pld`: prompt-lookup decoding, n-gram drafting from the context (Saxena 2023; transformers'
``prompt_lookup_num_tokens``, vLLM's and SGLang's n-gram speculators).

Each step the last n tokens of the sequence (n from ``max_n`` down to ``min_n``, longest first) are matched
against the prompt and the text generated so far; the tokens that followed their latest earlier occurrence, at
most ``max_draft`` of them, are drafted as one chain. Drafts are deterministic (verified with q = 1 on the drafted
token, so sampling stays lossless) and cost no drafter FLOPs: the lookup is a dict read on the host.
Unlike transformers, which takes the earliest match, the latest is used: recent text predicts code better.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError


@dataclass(frozen=True)
class PromptLookupOptions:
    min_n: int = 1  # shortest n-gram matched
    max_n: int = 3  # longest n-gram matched (tried first)
    max_draft: int = 8  # most tokens drafted per step

    def __post_init__(self) -> None:
        if not 1 <= self.min_n <= self.max_n:
            raise DraftcountError(f"method 'pld' needs 1 <= min_n <= max_n, got min_n={self.min_n} "
                                  f"max_n={self.max_n}")
        if self.max_draft < 1:
            raise DraftcountError(f"option 'max_draft' of method 'pld' must be >= 1, got {self.max_draft}")
