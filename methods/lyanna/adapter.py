"""`lyanna`: the paper's hidden-state drafter (DESIGN section 3) drafting beam-grown trees.

Each round: (1) catch-up: the backbone is fed the target's true features of the
tokens accepted since the last round (one forward); its last output is the
depth-1 state. (2) Depths 2..K: one single-token backbone step each, fed its
own previous state; these states do not depend on any draft token. (3) The
tree grows beam-style (``harness.trees.beam``, shared with `eagle`): a node's
draft logits are its depth's state logits plus its parent token's information
(``inject``), optionally plus the previous round's logits for the same
absolute position (``reuse=logits``, weight ``reuse_weight``, as log-probability
terms). (4) After verification the speculative entries leave the backbone's
cache; with ``reuse=states`` those at and beyond the next round's depth-1
position are kept, with their states, so the next round runs the backbone only
beyond the previous chain.

Useful drafter FLOPs: the catch-up, the state and injection work of the
accepted depths, and states or logits that the next round reuses. Counters
(``extra``): backbone_states_computed / _reused / _wasted (computed states
that neither reached an accepted token nor were reused; the catch-up's state
always counts as used) and backbone_logits_reused.
"""

from __future__ import annotations

import copy

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import DynamicCache

from harness.engine.adapter import AdapterBase, StepContext
from harness.trees.beam import BeamTree, Frontier, grow_beam_tree
from harness.engine.counters import DrafterWork, book_drafting_forward
from harness.engine.drafting import beam_draws
from harness.backend.forward import LMOutput, positions, run_drafter
from harness.backend.kv_cache import append_entries, crop_cache
from harness.backend.models import LoadedModel
from harness.backend.device import SideStream
from harness.backend.device import index_on
from harness.trees.tree import TokenTree
from harness.verify.verdict import Verdict
from harness.engine.method_spec import BuildInputs
from harness.training.features import feature_indices, feature_rows
from methods.lyanna import LyannaOptions
from methods.lyanna.batch import LyannaRows
from methods.lyanna.graphed import graphed_propose, graphs_draft
from methods.lyanna.model import LyannaModel, load_drafter


@dataclass
class _Chain:
    """The states (and their log-probabilities) one round computed, by absolute position they predict."""

    states: dict[int, torch.Tensor]
    logprobs: dict[int, torch.Tensor]
    cache_keys: list[torch.Tensor] | None = None  # reuse=states: kept speculative entries
    cache_values: list[torch.Tensor] | None = None
    stacked_logprobs: torch.Tensor | None = None  # ``logprobs``' values as one (rows, V) tensor, in position order


class LyannaAdapter(AdapterBase):
    """The `lyanna` adapter (see the module docstring)."""

    wants_target_hidden_states = True

    def __init__(self, drafter: LyannaModel, target: LoadedModel, options: LyannaOptions) -> None:
        self.drafter = drafter.to(target.device, target.dtype).eval()
        self.device, self.dtype = target.device, target.dtype
        self.options = options
        self.target_hidden_layers = feature_indices(drafter.arch.features)
        self.separate_root_forward = options.verify_fusion == "off"
        self.shape = options.shape()
        self.max_draft_nodes = self.shape.max_nodes
        self.cost = drafter.backbone_cost()
        self.details = {"top_k": self.shape.top_k, "depth": self.shape.depth, "budget": self.shape.budget,
                        "reuse": options.reuse, "verify_fusion": options.verify_fusion, "overlap": options.overlap,
                        "inject": drafter.arch.inject, "fusion": drafter.arch.fusion,
                        "drafter_parameters": drafter.trainable_parameters(), **drafter.draft_vocab.describe()}
        self.side = SideStream(self.device)  # overlap=on: the run-ahead steps, beside the target's verification
        self._reset()

    def batch_row(self):
        """A copy for one row of a static batch: the drafter shared, the state reset by ``begin``."""
        row = copy.copy(self)
        row.side = SideStream(self.device)  # its own run-ahead stream: rows draft one after another
        return row

    def batch_drafting(self, count: int) -> LyannaRows | None:
        """Every row of a static batch drafted by one backbone forward per depth (``methods.lyanna.batch``); with
        reuse=states (and so overlap) each row keeps speculative cache entries of its own: rows one after another."""
        return None if self.options.reuse == "states" else LyannaRows(self, count)

    def _reset(self, ctx: StepContext | None = None) -> None:
        lookahead = self.shape.depth + self.options.overlap_steps + 2  # the chain and the states run ahead
        self.cache = (ctx.drafter_cache(self, self.drafter.config, lookahead, self.dtype, self.device)
                      if ctx is not None else DynamicCache(config=self.drafter.config))
        self.graphs = (ctx.drafter_graphs(self, self.drafter.config, self.device, self.dtype)
                       if ctx is not None else None)
        self.fed_len = 0
        self.pending = torch.empty(0, device=self.device)
        self.previous: _Chain | None = None
        self.beam: BeamTree | None = None
        self.depth_positions: list[int] = []
        self.root_logits: torch.Tensor | None = None  # unfused verification: the target's logits at the root
        self.work = DrafterWork()  # nothing charged in an earlier generation carries over

    def _inputs(self, hidden_states: tuple[torch.Tensor | None, ...], index) -> torch.Tensor:
        rows = feature_rows(hidden_states, self.drafter.arch.features)
        return self.drafter.true_inputs([state[0, index] for state in rows])

    def _step(self, ctx: StepContext, inputs: torch.Tensor, start: int) -> tuple[torch.Tensor, float]:
        count = inputs.shape[0]
        past = self.cache.get_seq_length()

        def call(buffers: dict[str, torch.Tensor], mask: torch.Tensor | None) -> torch.Tensor:
            return self.drafter(buffers["inputs"][None], buffers["position_ids"], self.cache, mask)[0]

        with ctx.counters.phase("drafter"):
            out = run_drafter(call, self.cache, {"inputs": inputs, "position_ids": positions(start, count, self.device)},
                              count, None, self.dtype, self.graphs, key="backbone")
        flops = self.cost.forward_flops(count, past + count, 0)
        ctx.counters.drafter.add(count, flops)
        return out, flops

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self._reset(ctx)
        self.pending = self._inputs(prefill.hidden_states, slice(None))

    def observe_root(self, ctx: StepContext, root_out: LMOutput) -> None:
        """Unfused verification: the root's true feature joins the catch-up; its logits give depth 1."""
        self.pending = torch.cat([self.pending, self._inputs(root_out.hidden_states, slice(None))])
        self.root_logits = root_out.logits[0, -1]

    def _depth_states(self, ctx: StepContext, first_position: int, last_position: int) -> dict[int, torch.Tensor]:
        """States predicting positions first_position .. last_position: the catch-up's last output, then
        one backbone step each (or, with reuse=states, the previous chain's state where it has one)."""
        previous = self.previous
        count = self.pending.shape[0]
        out, flops = self._step(ctx, self.pending, self.fed_len)
        # its context positions: useful; its last one drafts the first depth: useful iff a node there is accepted
        book_drafting_forward(ctx.counters, self.work, flops, count, ("state", first_position))
        self.fed_len += count
        states = {first_position: out[-1]}
        self.computed = {first_position}
        if previous is not None and previous.cache_keys is not None:
            append_entries(self.cache, previous.cache_keys, previous.cache_values)
        for position in range(first_position + 1, last_position + 1):
            self._reuse_or_extend(ctx, states, position, "backbone_states_reused")
        return states

    def _reuse_or_extend(self, ctx: StepContext, states: dict[int, torch.Tensor], position: int,
                         reuse_counter: str) -> None:
        """The previous round's state for ``position`` (reuse=states: its KV entry is back in the cache, so it is
        not fed again), counted under ``reuse_counter``; else one backbone step."""
        previous = self.previous
        if self.options.reuse == "states" and previous is not None and position in previous.states:
            states[position] = previous.states[position]
            ctx.counters.add_extra(reuse_counter, 1)
        else:
            self._extend(ctx, states, position)

    def _extend(self, ctx: StepContext, states: dict[int, torch.Tensor], position: int) -> None:
        """One backbone step: feed the state of ``position - 1`` at that position, keep the state it predicts."""
        out, flops = self._step(ctx, self.drafter.own_inputs(states[position - 1][None]), position - 1)
        self.work.charge([("state", position)], flops)
        states[position] = out[-1]
        self.computed.add(position)

    def _book(self, ctx: StepContext, units: list, flops: float) -> None:
        """Drafter work outside a backbone forward (logits, injection): counted, and charged to ``units``."""
        ctx.counters.drafter.flops += flops
        self.work.charge(units, flops)

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        if graphs_draft(self, ctx, self.pending.shape[0]):  # the whole draft as one graph (``methods.lyanna.graphed``)
            return graphed_propose(self, ctx, sequence)
        first = sequence.shape[-1] - 1  # depth-1 nodes sit after the root: their state predicts the root's feature
        self.depth_positions = list(range(first, first + self.shape.depth))
        root_known = self.root_logits is not None
        states = self._depth_states(ctx, first + root_known, self.depth_positions[-1])
        return self.tree_from_states(ctx, sequence[0, -1], states)

    def tree_from_states(self, ctx: StepContext, root: torch.Tensor, states: dict[int, torch.Tensor]) -> TokenTree:
        """The round's tree from its depth states (by the position they predict; ``depth_positions`` set): their
        logits, the injection of each node's parent token, the beam; with overlap=on, the run-ahead."""
        root_known = self.root_logits is not None
        with_states = [p for p in self.depth_positions if p in states]
        stacked = torch.stack([states[p] for p in with_states])
        with ctx.counters.phase("drafter"):
            base = self.drafter.state_logits(stacked)
        head_flops = 2.0 * base.shape[-1] * stacked.shape[-1]  # one state's LM-head logits
        self._book(ctx, [("state", p) for p in with_states], head_flops * len(with_states))
        logprobs = torch.log_softmax(base.float(), dim=-1)
        extra = torch.zeros_like(logprobs)
        if self.options.reuse == "logits" and self.previous is not None:
            for row, position in enumerate(with_states):
                if position in self.previous.logprobs:
                    extra[row] = self.options.reuse_weight * self.previous.logprobs[position]
                    ctx.counters.add_extra("backbone_logits_reused", 1)
        self.chain = _Chain(states=states, logprobs={p: logprobs[row] for row, p in enumerate(with_states)},
                            stacked_logprobs=logprobs)

        def node_logprobs(depth: int, parents: torch.Tensor) -> torch.Tensor:
            if depth == 1 and root_known:  # the target's own distribution after the root (in the draft vocabulary)
                root_logits = self.drafter.draft_vocab.restrict(self.root_logits)
                return torch.log_softmax(root_logits.float(), dim=-1).expand(parents.shape[0], -1)
            row = depth - 1 - root_known
            with ctx.counters.phase("drafter"):
                logits = self.drafter.node_logits(stacked[row], parents.to(self.device), base[row]).float()
            self._book(ctx, [("inject", depth)], self.drafter.injection_flops(parents.shape[0]))
            return torch.log_softmax(torch.log_softmax(logits, dim=-1) + extra[row], dim=-1)

        def expand(frontier: Frontier) -> torch.Tensor:
            return node_logprobs(frontier.depth + 1, frontier.tokens)

        self.beam = grow_beam_tree(root, node_logprobs(1, root.reshape(1))[0], expand, self.shape,
                                   self.drafter.draft_vocab.token_map, beam_draws(ctx, self.shape))
        if self.options.overlap == "on":
            self._run_ahead(ctx, states)
        return self.beam.tree

    def _cache_tensors(self) -> list[torch.Tensor]:
        return [tensor for layer in self.cache.layers for tensor in (layer.keys, layer.values) if tensor is not None]

    def _run_ahead(self, ctx: StepContext, states: dict[int, torch.Tensor]) -> None:
        """Backbone steps beyond the chain, for the next round to reuse: on a GPU they run on a side stream while
        the engine launches the target's verification; ``commit`` joins them."""
        last = self.depth_positions[-1]
        with self.side.launch([*self._cache_tensors(), states[last]]):
            for position in range(last + 1, last + 1 + self.options.overlap_steps):  # run ahead last round: carried
                self._reuse_or_extend(ctx, states, position, "backbone_states_carried")

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        self.side.join([*self._cache_tensors(), *self.chain.states.values()])
        accepted = verdict.num_accepted
        root_fed = self.root_logits is not None
        next_first = self.depth_positions[0] + accepted + 1
        next_last = next_first + self.shape.depth - 1  # the next round's chain
        reused_from = next_first + root_fed + (1 if self.options.reuse == "states" else 0)
        useful = [("state", p) for p in self.depth_positions[: accepted]]
        useful += [("inject", depth) for depth in range(1, accepted + 1)]
        if self.options.reuse != "off":
            useful += [("state", p) for p in self.chain.states if reused_from <= p <= next_last]
        # states run ahead beyond the next chain are carried to the next run-ahead undecided: useful only once a
        # chain drafts with them
        carried = [("state", p) for p in self.chain.states if p > next_last] if self.options.reuse == "states" else []
        self.work.settle(ctx.counters, useful, carried)
        kept = {unit[1] for unit in useful + carried if unit[0] == "state"} | {self.depth_positions[0] + root_fed}
        ctx.counters.add_extra("backbone_states_computed", len(self.computed))
        ctx.counters.add_extra("backbone_states_wasted", len(self.computed - kept))
        keep_from = self.fed_len + accepted + 1  # cache slot of the next round's depth-1 position
        if self.options.reuse == "states" and keep_from < self.cache.get_seq_length():
            self.chain.cache_keys = [layer.keys[..., keep_from:, :] for layer in self.cache.layers]
            self.chain.cache_values = [layer.values[..., keep_from:, :] for layer in self.cache.layers]
        crop_cache(self.cache, self.fed_len)
        self.previous = self.chain
        path = verdict.path[1:] if root_fed else verdict.path  # a root fed on its own is in the cache already
        index = index_on(path, target_out.logits.device)
        self.pending = self._inputs(target_out.hidden_states, index)
        self.root_logits = None


def build(options: LyannaOptions, inputs: BuildInputs) -> LyannaAdapter:
    drafter = load_drafter(Path(inputs.drafter_dir), inputs.target.model)
    return LyannaAdapter(drafter, inputs.target, options)
