"""`pld`: its adapter and ``METHOD`` (the options are the package's: ``methods.pld``)."""

from __future__ import annotations


import torch

from harness.engine.adapter import AdapterBase, StepContext
from methods.pld import PromptLookupOptions
from harness.engine.method_spec import BuildInputs, MethodSpec, NO_DRAFTING
from harness.backend.forward import LMOutput
from harness.retrieval.context_index import ContextIndex
from harness.trees.tree import TokenTree, chain_tree


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
        self.index.sync(ctx.tokens)
        match = self.index.continuation(self.max_draft)
        if match is not None:
            ctx.counters.add_extra("lookup_hits", 1)
        return chain_tree(self.index.tokens[-1], match.tokens if match else [], sequence.device)


def _build(options: PromptLookupOptions, inputs: BuildInputs) -> PromptLookupAdapter:
    return PromptLookupAdapter(options)


METHOD = MethodSpec(options=PromptLookupOptions, build=_build, cost=NO_DRAFTING)
