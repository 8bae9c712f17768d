"""`suffix`: Suffix Decoding (Oliaro, Jia, Campos, Qiao; NeurIPS 2025, arXiv 2411.04975; vLLM's ``method: suffix``,
Arctic Inference).

Model-free. Two suffix trees: one per request over its prompt and output, and one global tree over the outputs of
the run's earlier requests (in the recorded order, persisting across the run's generations; warm-ups excluded),
so a run whose requests repeat each other's outputs (agentic loops, successive edits: the prompt set
``stdlib_edits``) drafts from them. Each step the newest tokens are matched at every length, a speculation tree
is grown best-first by frequency-estimated path probability, its size adapting to the match length (at most
``match_len * max_spec_factor + max_spec_offset`` nodes, each of probability >= ``min_token_prob``), and the
higher-scoring tree of the two is drafted. Drafts are deterministic (verified with q = 1, lossless at any
temperature) and cost no drafter FLOPs. The trees: ``harness.retrieval.suffix_tree``. Defaults are vLLM's
(depth 24, 10,000 cached requests, factor 1, min probability 0.1), with the paper's trees instead of vLLM's paths.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import DraftcountError


@dataclass(frozen=True)
class SuffixOptions:
    max_depth: int = 24  # the suffix trees' depth: the longest match plus speculation (vLLM max_tree_depth)
    max_spec_tokens: int = 24  # the most draft nodes a step (vLLM: num_speculative_tokens, default the depth)
    max_spec_factor: float = 1.0  # draft nodes per matched token
    max_spec_offset: float = 0.0  # draft nodes added to that
    min_token_prob: float = 0.1  # the least estimated path probability a drafted node may have
    max_cached_requests: int = 10000  # outputs kept in the global tree, oldest evicted first (0: no global tree)
    tree: bool = True  # a speculation tree (the paper); false: the single most frequent path (vLLM)

    def __post_init__(self) -> None:
        if self.max_depth < 2:
            raise DraftcountError(f"option 'max_depth' of method 'suffix' must be >= 2, got {self.max_depth}")
        if self.max_spec_tokens < 1:
            raise DraftcountError(f"option 'max_spec_tokens' of method 'suffix' must be >= 1, got "
                                  f"{self.max_spec_tokens}")
        if self.max_spec_factor < 0 or self.max_spec_offset < -self.max_depth:
            raise DraftcountError(f"method 'suffix' needs max_spec_factor >= 0 (got {self.max_spec_factor}) and "
                                  f"max_spec_offset >= -max_depth (got {self.max_spec_offset})")
        if not 0 <= self.min_token_prob <= 1:
            raise DraftcountError(f"option 'min_token_prob' of method 'suffix' must be in [0, 1], got "
                                  f"{self.min_token_prob}")
        if self.max_cached_requests < -1:
            raise DraftcountError(f"option 'max_cached_requests' of method 'suffix' must be >= -1 (-1: no limit), "
                                  f"got {self.max_cached_requests}")
