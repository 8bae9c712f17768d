"""`owl`: OWL's LSTM drafter drafting EAGLE-2 dynamic trees, and HOWL, its hybrid with suffix matching.

Each round the LSTM starts from the target's last hidden state of the newest accepted position (the one that
produced the root) and the root token; its first step gives the root's children, and the tree grows beam-style
(``harness.trees.beam``): every expanded frontier node runs one LSTM step from its parent's state and cell, fed its
own token. No KV cache and no attention: nothing of the context but h_N reaches the drafter, so its drafts and
its cost are the same at any context length.

HOWL (``hybrid: suffix``): before drafting, the context's own continuation is looked up
(``harness.retrieval.context_index``, as `pld` and `reader` do); its score is the length of the suffix it
matched. When the score reaches ``threshold`` the retrieved continuation (at most ``max_draft`` tokens) is drafted
as a chain instead of the LSTM tree, and the LSTM does not run that step. Which of the two each step used is
counted (extras ``howl_chain_steps`` / ``howl_tree_steps``, accepted tokens of each) and traced per step
(``howl_chain``: 1 chain, 0 tree).

Drafts are deterministic top-k or retrieved tokens (q = 1), verified by the shared verifier. Drafter FLOPs: the
first step is useful when a depth-1 node was accepted, a frontier node's step when one of its children was.
"""

from __future__ import annotations


import torch

from harness.backend.forward import LMOutput
from harness.backend.models import LoadedModel
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.counters import DrafterWork
from harness.engine.drafting import beam_draws
from harness.engine.method_spec import BuildInputs
from harness.retrieval.context_index import ContextIndex, Match
from harness.trees.beam import BeamTree, Frontier, grow_beam_tree
from harness.trees.tree import TokenTree, chain_tree
from harness.verify.verdict import Verdict
from methods.owl import OwlOptions
from methods.owl.graphed import FIRST_STEP, graphed_tree, graphs_draft
from methods.owl.model import LstmState, OwlLstm, load_lstm


def chosen_chain(match: Match | None, threshold: int) -> list[int] | None:
    """HOWL's choice: the retrieved continuation when its suffix-match length reaches ``threshold``, else None
    (draft the LSTM tree)."""
    return match.tokens if match is not None and match.ngram >= threshold else None


class OwlAdapter(AdapterBase):
    """The `owl` adapter (see the module docstring)."""

    wants_target_hidden_states = True
    target_hidden_layers = (-1,)

    def __init__(self, drafter: OwlLstm, target: LoadedModel, options: OwlOptions) -> None:
        self.drafter = drafter.to(target.device, target.dtype).eval()
        self.lm_head = target.model.get_output_embeddings()
        self.target_config = target.config
        self.graphs = None
        self.cost = drafter.cost(self.lm_head.weight.numel())
        self.options = options
        self.shape = options.shape()
        self.index = ContextIndex(options.min_n, options.max_n) if options.hybrid == "suffix" else None
        self.max_draft_nodes = max(self.shape.max_nodes, options.max_draft if self.index else 0)
        self.details = {"top_k": self.shape.top_k, "depth": self.shape.depth, "budget": self.shape.budget,
                        "hybrid": options.hybrid, "drafter": "sum-lstm", "drafter_trained_depth":
                        drafter.arch.n_predict, "drafter_parameters": drafter.trainable_parameters(),
                        **drafter.draft_vocab.describe(),
                        **({"threshold": options.threshold, "min_n": options.min_n, "max_n": options.max_n,
                            "max_draft": options.max_draft} if self.index else {})}
        self._reset()

    def _reset(self) -> None:
        # (H,) the target's last hidden state at the newest accepted position
        self.last_hidden = torch.empty(0, device=self.lm_head.weight.device)
        self.beam: BeamTree | None = None
        self.work = DrafterWork()

    def _step(self, ctx: StepContext, carried: LstmState,
              tokens: torch.Tensor) -> tuple[LstmState, torch.Tensor, float]:
        """One LSTM step over rows: their new state and the log-probabilities of their children, counted."""
        with ctx.counters.phase("drafter"):
            stepped, logprobs = self.lstm_step(carried, tokens)
        return stepped, logprobs, self.count_step(ctx, tokens.shape[0])

    def lstm_step(self, carried: LstmState, tokens: torch.Tensor) -> tuple[LstmState, torch.Tensor]:
        """One LSTM step over rows, device work only: their new state and their children's log-probabilities."""
        with torch.no_grad():
            stepped = self.drafter.step(carried, tokens)
            return stepped, torch.log_softmax(self.drafter.logits(stepped.state, self.lm_head).float(), dim=-1)

    def count_step(self, ctx: StepContext, rows: int) -> float:
        """Book one LSTM step over ``rows`` rows as a drafter forward; its FLOPs."""
        flops = self.cost.forward_flops(rows, rows, rows)
        ctx.counters.drafter.add(rows, flops)
        return flops

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self._reset()
        weight = self.lm_head.weight  # cuda_graphs=on: the LSTM tree as one graphed block (``methods.owl.graphed``)
        self.graphs = ctx.drafter_graphs(self, self.target_config, weight.device, weight.dtype)
        self.last_hidden = prefill.hidden_states[-1][0, -1]
        if self.index is not None:
            self.index.reset()

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        self.beam = None
        if self.index is not None:
            self.index.sync(ctx.tokens)
            chain = chosen_chain(self.index.continuation(self.options.max_draft), self.options.threshold)
            ctx.counters.add_trace("howl_chain", float(chain is not None))
            if chain is not None:
                ctx.counters.add_extra("howl_chain_steps", 1)
                return chain_tree(self.index.tokens[-1], chain, sequence.device)
            ctx.counters.add_extra("howl_tree_steps", 1)
        return self._lstm_tree(ctx, sequence[0, -1])

    def _lstm_tree(self, ctx: StepContext, root: torch.Tensor) -> TokenTree:
        if graphs_draft(self, ctx):
            return graphed_tree(self, ctx, root)
        with ctx.counters.phase("drafter"), torch.no_grad():
            start = self.drafter.start(self.last_hidden[None])
        first, root_logprobs, flops = self._step(ctx, start, root.reshape(1))
        self.work.charge([FIRST_STEP], flops)
        states = [first]  # per expanded depth: the LSTM states of that depth's frontier (the root first)

        def expand(frontier: Frontier) -> torch.Tensor:
            stepped, logprobs, cost = self._step(ctx, states[-1].rows(frontier.parent_rows), frontier.tokens)
            self.work.charge([(frontier.depth, row) for row in range(frontier.tokens.shape[0])], cost)
            states.append(stepped)
            return logprobs

        self.beam = grow_beam_tree(root, root_logprobs[0], expand, self.shape, self.drafter.draft_vocab.token_map,
                                   beam_draws(ctx, self.shape))
        return self.beam.tree

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        if self.beam is not None:
            slots = self.beam.parent_slots  # nodes past them were grafted on by a composing method (hedgespec)
            useful = [slots[node] or FIRST_STEP for node in verdict.path[1:] if node < len(slots)]
            self.work.settle(ctx.counters, useful)
        if self.index is not None:
            kind = "tree" if self.beam is not None else "chain"
            ctx.counters.add_extra(f"howl_{kind}_accepted", verdict.num_accepted)
        self.last_hidden = target_out.hidden_states[-1][0, verdict.path[-1]]


def build(options: OwlOptions, inputs: BuildInputs) -> OwlAdapter:
    return OwlAdapter(load_lstm(inputs.drafter_dir, inputs.target.model), inputs.target, options)
