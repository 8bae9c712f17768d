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

import torch

from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.method_spec import BuildInputs, MethodSpec
from harness.errors import DraftcountError
from harness.backend.forward import LMOutput
from harness.measure.costs import NO_DRAFTING
from harness.retrieval.context_index import ContextIndex
from harness.trees.tree import TokenTree


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


def chain_tree(root: int, drafts: list[int], device: torch.device) -> TokenTree:
    """A deterministic chain: the root, then ``drafts`` one below the other."""
    return TokenTree(torch.tensor([root, *drafts], device=device), tuple(range(-1, len(drafts))))


class PromptLookupAdapter(AdapterBase):
    """The `pld` adapter (see the module docstring)."""

    def __init__(self, options: PromptLookupOptions) -> None:
        self.index = ContextIndex(options.min_n, options.max_n)
        self.max_draft = options.max_draft
        self.max_draft_nodes = options.max_draft
        self.details = {"min_n": options.min_n, "max_n": options.max_n, "max_draft": options.max_draft}

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self.index.reset()

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        self.index.sync(sequence)
        match = self.index.continuation(self.max_draft)
        if match is not None:
            ctx.counters.add_extra("lookup_hits", 1)
        return chain_tree(self.index.tokens[-1], match.tokens if match else [], sequence.device)


def _build(options: PromptLookupOptions, inputs: BuildInputs) -> PromptLookupAdapter:
    return PromptLookupAdapter(options)


METHOD = MethodSpec(options=PromptLookupOptions, build=_build, cost=NO_DRAFTING)
