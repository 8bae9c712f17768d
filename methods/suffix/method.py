"""`suffix`: its adapter and ``METHOD`` (the options are the package's: ``methods.suffix``)."""

from __future__ import annotations

from dataclasses import asdict

import torch

from harness.backend.forward import LMOutput
from harness.engine.adapter import WARM_UP_KEY, AdapterBase, StepContext
from harness.engine.method_spec import BuildInputs, MethodSpec, NO_DRAFTING
from harness.retrieval.suffix_tree import SpeculationLimits, SuffixCache
from harness.trees.tree import TokenTree
from harness.backend.device import index_on
from methods.suffix import SuffixOptions


class SuffixAdapter(AdapterBase):
    """The `suffix` adapter (see the package docstring). One instance serves a run: its global tree outlives
    ``begin``, which starts only the request's own tree."""

    def __init__(self, options: SuffixOptions) -> None:
        self.cache = SuffixCache(options.max_depth, options.max_cached_requests)
        self.limits = SpeculationLimits(options.max_spec_tokens, options.max_spec_factor, options.max_spec_offset,
                                        options.min_token_prob, options.tree)
        self.max_draft_nodes = options.max_spec_tokens
        self.seen = 0  # tokens of ctx.tokens already in the trees
        self.details = asdict(options)

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        prompt_len = prompt_ids.shape[-1]
        ctx.counters.add_extra("suffix_cached_requests", len(self.cache.cached))
        self.cache.start_request(ctx.tokens[:prompt_len], ctx.tokens[prompt_len:], ctx.prompt_key != WARM_UP_KEY)
        self.seen = len(ctx.tokens)

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        self.cache.add_output(ctx.tokens[self.seen:])
        self.seen = len(ctx.tokens)
        draft, source = self.cache.speculate(ctx.tokens, self.limits)
        if draft.tokens:
            ctx.counters.add_extra(f"suffix_{source}_drafts", 1)
            ctx.counters.add_extra("suffix_match_tokens", draft.match_len)
        return TokenTree(index_on([ctx.tokens[-1], *draft.tokens], sequence.device),
                         (-1, *(parent + 1 for parent in draft.parents)))


def _build(options: SuffixOptions, inputs: BuildInputs) -> SuffixAdapter:
    return SuffixAdapter(options)


METHOD = MethodSpec(options=SuffixOptions, build=_build, cost=NO_DRAFTING)
