"""`reader`: its adapter and ``METHOD`` (the options are the package's: ``methods.reader``)."""

from __future__ import annotations

from pathlib import Path

import torch

from harness.backend.forward import LMOutput
from harness.engine.adapter import AdapterBase, DraftAdapter, StepContext
from methods.reader import ReaderOptions
from harness.engine.method_spec import (
    BuildInputs, CostModel, Latencies, MethodSpec, build_adapter, method_spec, option,
)
from harness.retrieval.context_index import ContextIndex
from harness.retrieval.datastore import Datastore, load_datastore
from harness.trees.graft import HostTree
from harness.trees.tree import TokenTree, root_only
from harness.verify.verdict import Verdict


class ReaderAdapter(AdapterBase):
    """The `reader` adapter (see the module docstring)."""

    def __init__(self, options: ReaderOptions, neural: DraftAdapter | None, datastore: Datastore | None) -> None:
        self.options = options
        self.neural = neural
        self.datastore = datastore
        self.index = ContextIndex(options.min_n, options.max_n)
        self.wants_target_hidden_states = neural.wants_target_hidden_states if neural else False
        self.target_hidden_layers = neural.target_hidden_layers if neural else None
        self.max_draft_nodes = (neural.max_draft_nodes if neural else 0) + options.depth * (1 + options.width)
        self.neural_tree: TokenTree | None = None
        self.details = {"depth": options.depth, "width": options.width, "max_n": options.max_n,
                        "datastore": Path(options.datastore).name if options.datastore else "",
                        "datastore_tokens": len(datastore) if datastore else 0,
                        **({"head": dict(neural.details)} if neural else {})}

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self.index.reset()
        if self.neural:
            self.neural.begin(ctx, prompt_ids, prefill)

    def retrieved_chains(self) -> list[list[int]]:
        chains = []
        match = self.index.continuation(self.options.depth)
        if match:
            chains.append(match.tokens)
        if self.datastore and self.options.width:
            chains += self.datastore.continuations(self.index.tokens, self.options.min_n, self.options.depth,
                                                   self.options.width)
        return chains

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        self.index.sync(ctx.tokens)
        self.neural_tree = self.neural.propose(ctx, sequence) if self.neural else root_only(sequence[0, -1])
        # retrieval alone starts from the root on the host; a head's tree is read back to graft onto it
        tree = HostTree.of(self.neural_tree) if self.neural else HostTree([ctx.tokens[-1]], [-1], [None])
        for chain in self.retrieved_chains():
            tree.graft(chain)
        ctx.counters.add_extra("retrieved_nodes", len(tree.tokens) - self.neural_tree.size)
        return tree.token_tree(sequence.device)

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        accepted_retrieved = sum(node >= self.neural_tree.size for node in verdict.path[1:])
        ctx.counters.add_extra("accepted_retrieved", accepted_retrieved)
        if self.neural:  # the drafter's nodes keep their indices; grafted ones come after them
            self.neural.commit(ctx, tree, verdict, target_out)


def _build(options: ReaderOptions, inputs: BuildInputs) -> ReaderAdapter:
    neural = None
    if options.head:
        neural, _ = build_adapter("eagle", {"top_k": options.head_top_k, "depth": options.head_depth,
                                            "budget": options.head_budget},
                                  BuildInputs(inputs.target, None, Path(options.head)))
    datastore = load_datastore(options.datastore) if options.datastore else None
    return ReaderAdapter(options, neural, datastore)


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    """The head's EAGLE drafting when a head is given (retrieval is host work, not modelled); else nothing."""
    if not option(options, "head", ""):
        return 0.0
    return method_spec("eagle").cost.drafting_seconds({"depth": option(options, "head_depth", 5)}, latencies)


METHOD = MethodSpec(options=ReaderOptions, build=_build, cost=CostModel(drafting_seconds))
