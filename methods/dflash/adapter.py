"""`dflash`: a DFlash drafter's block, verified as a chain (or a tree of each position's top-k).

Each step the drafter runs once: the context rows it has not seen (the fused target states of the positions
accepted since the last step) and the block [root, MASK x (B - 1)] at positions p..p+B-1, the block attending to
the whole context and to itself without a causal mask. Its cache keeps the context alone (the block's keys are
dropped). Greedy, position i drafts its argmax; sampling, a draw from its warped distribution, which the verifier
gets as q. With ``top_k`` > 1 the positions' top-k tokens form a beam tree (``harness.trees.beam``) scored by the sum
of the positions' log-probabilities, drafted deterministically as EAGLE's are.

Drafter FLOPs: the context rows' share of the forward is useful (kept); the block's share is booked over the draft
nodes, useful for the accepted ones.

A step runs in two halves: ``step_outputs``, the device work from the drafting slots' outputs (the LM head, then
the chain's argmax, the beam tree, or at T > 0 under the ``sampled`` convention the chain's draws and q's), and
``tree_of``, the step's tree from those outputs. Under ``kv_cache=static cuda_graphs=on`` the forward and the first
half run as one graphed block (``methods.dflash.graphed``), else eagerly.
"""

from __future__ import annotations

import copy

import torch

from harness.backend.device import index_on
from harness.backend.forward import LMOutput, positions
from harness.backend.kv_cache import crop_cache, new_cache
from harness.backend.models import LoadedModel
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.counters import DrafterWork, count_useful_drafter_flops
from harness.engine.method_spec import BuildInputs
from harness.training.features import feature_indices, feature_rows
from harness.trees.beam import BeamTree, Frontier, beam_from_tensors, beam_tensors, beam_width, grow_beam_tree
from harness.trees.beam_shape import BeamShape
from harness.trees.tree import TokenTree
from harness.verify.sampling import logits_to_probs, sample_from_probs
from harness.verify.verdict import Verdict
from methods.dflash import DFlashOptions
from methods.dflash.batch import DFlashRows
from methods.dflash.checkpoint import load_drafter
from methods.dflash.graphed import graphed_outputs, graphs_draft
from methods.dflash.model import DFlashDrafter


def tree_shape(options: DFlashOptions, drafts: int) -> BeamShape | None:
    """The beam tree over the block's ``drafts`` positions, or None for a chain."""
    if options.top_k == 1:
        return None
    return BeamShape(options.top_k, drafts, options.budget or drafts * options.top_k)


class DFlashAdapter(AdapterBase):
    """The `dflash` adapter (see the module docstring); `dspark` extends it."""

    wants_target_hidden_states = True

    def __init__(self, drafter: DFlashDrafter, target: LoadedModel, options: DFlashOptions) -> None:
        self.drafter = drafter.to(target.device, target.dtype).eval()
        self.embed = self.drafter.input_embedding(target.model.get_input_embeddings())
        self.lm_head = target.model.get_output_embeddings()  # the target's (its draft vocabulary's rows draft)
        self.vocab = self.drafter.draft_vocab
        self.device, self.dtype = target.device, target.dtype
        self.block_size = options.block_size or drafter.block_size
        self.drafts = drafter.drafts_per_block(self.block_size)
        self.convention = getattr(options, "drafts", "sampled")  # a chain at T > 0: sampled (q carried) or topk (q = 1)
        self.shape = tree_shape(options, self.drafts)
        # the slots the LM head reads: a chain's drafts verified (a tree's: every slot; its options allow no cut)
        self.verified = min(options.as_run().verify_length or self.drafts, self.drafts)
        self.target_hidden_layers = feature_indices(drafter.features)
        self.max_draft_nodes = self.shape.max_nodes if self.shape else self.verified
        self.cost = drafter.cost(self.lm_head.weight.numel())
        self.details = {"block_size": self.block_size, "verify_length": self.verified, "top_k": options.top_k,
                        "tree_nodes": self.max_draft_nodes,
                        "feature_layers": list(drafter.features.layers), "drafter_layers": len(drafter.layers),
                        "drafter_parameters": drafter.trainable_parameters(), **drafter.draft_vocab.describe()}
        self._reset(None, [])

    def batch_row(self):
        """A copy for one row of a static batch: the drafter shared, the state reset by ``begin``."""
        row = copy.copy(self)
        return row

    def _reset(self, ctx: StepContext | None, rows: list[torch.Tensor]) -> None:
        """A new generation: the drafter's cache (static under ``kv_cache=static``; room for the block beyond the
        sequence) and, under ``cuda_graphs=on``, its graph runner; ``rows`` are the prompt's context rows."""
        config = self.drafter.config
        self.cache = (ctx.drafter_cache(self, config, self.block_size, self.dtype, self.device) if ctx is not None
                      else new_cache(config))
        self.graphs = ctx.drafter_graphs(self, config, self.device, self.dtype) if ctx is not None else None
        self.fed_len = 0
        self.pending = rows  # per feature layer: (n, H) target states of positions fed_len.. not yet fed
        self.work = DrafterWork()

    def _rows(self, hidden_states: tuple[torch.Tensor | None, ...], index: torch.Tensor | slice) -> list[torch.Tensor]:
        return [state[0, index] for state in feature_rows(hidden_states, self.drafter.features)]

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self._reset(ctx, self._rows(prefill.hidden_states, slice(None)))

    def batch_drafting(self, count: int) -> DFlashRows | None:
        """Every row of a static batch drafted in one forward a step (``methods.dflash.batch``); a subclass that
        plans its own step (`dspark`) drafts its rows one after another."""
        return DFlashRows(self, count) if type(self) is DFlashAdapter else None

    def draft_block(self, ctx: StepContext, root: torch.Tensor) -> torch.Tensor:
        """The drafter's one forward, eagerly: (drafts, width) outputs of the drafting slots; the context rows join
        its cache."""
        count, block = self.pending[0].shape[0], self.block_size
        with ctx.counters.phase("drafter"):
            context = self.drafter.context(self.pending)[None]
            hidden = self.drafter(context, self.block_input(root)[None],
                                  positions(self.fed_len, count + block, self.device), self.cache)
            crop_cache(self.cache, self.fed_len + count)  # keep the context; the block's keys are redrawn each step
        self.charge_block(ctx, count)
        return self.drafter.draft_rows(hidden[0])

    def block_input(self, root: torch.Tensor) -> torch.Tensor:
        """(block, width): the block's inputs, the root's embedding then the mask's."""
        return self.drafter.block_embeddings(self.embed(root.reshape(1, 1).to(self.device))[0, 0].to(self.dtype),
                                             self.embed, self.block_size)

    def charge_block(self, ctx: StepContext, count: int) -> None:
        """The step's forward over ``count`` context rows and the block, charged: the context's share useful, the
        block's booked over the draft nodes (a cut chain's unverified slots never settle: wasted); the context rows
        are fed."""
        block = self.block_size
        self.fed_len += count
        flops = self.cost.forward_flops(count + block, self.fed_len + block, self.verified)
        ctx.counters.drafter.add(count + block, flops)
        count_useful_drafter_flops(ctx.counters, flops * count / (count + block))
        self.work.charge(list(range(1, self.drafts + 1)), flops * block / (count + block))

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        root = sequence[0, -1]
        if graphs_draft(self):  # the forward and the step's device work as one graph (``methods.dflash.graphed``)
            outputs = graphed_outputs(self, ctx, root)
        else:
            hidden = self.draft_block(ctx, root)
            with ctx.counters.phase("drafter"):
                outputs = self.step_outputs(ctx, root, hidden, ctx.generator)
        with ctx.counters.phase("drafter"):
            return self.tree_of(ctx, root, outputs)

    def outputs_kind(self, ctx: StepContext) -> str:
        """What ``step_outputs`` returns this step (part of a graphed block's key): a beam tree's tensors
        (``beam``), a deterministic chain's tokens (``chain``), or a sampled chain's tokens and q's (``sampled``)."""
        if self.shape is not None:
            return "beam"
        return "chain" if ctx.sampling.is_greedy or self.convention == "topk" else "sampled"

    def step_outputs(self, ctx: StepContext, root: torch.Tensor, hidden: torch.Tensor,
                     generator: torch.Generator | None) -> tuple[torch.Tensor, ...]:
        """The step's device work from the drafting slots' outputs ``hidden`` (drafts, width), reading nothing on
        the host (the body of a graphed block): the LM head on the verified slots (a cut chain's others skip it),
        then ``logits_outputs`` (a sampled chain's draws from ``generator``)."""
        return self.logits_outputs(ctx, root, self.drafter.logits(hidden[:self.verified], self.lm_head), generator)

    def logits_outputs(self, ctx: StepContext, root: torch.Tensor, logits: torch.Tensor,
                       generator: torch.Generator | None) -> tuple[torch.Tensor, ...]:
        """``step_outputs`` from the drafting slots' logits (verified, N): the beam's tensors, the chain [root,
        argmax per position] (the ``topk`` convention: at every temperature, q = 1), or a sampled chain."""
        kind = self.outputs_kind(ctx)
        if kind == "beam":
            return beam_tensors(self.beam(root, logits))
        if kind == "chain":
            return (torch.cat([root.reshape(1), self.vocab.to_target(logits.argmax(-1)).to(root.device)]),)
        return self.sampled_chain(ctx, root, logits, generator)

    def tree_of(self, ctx: StepContext, root: torch.Tensor, outputs: tuple[torch.Tensor, ...]) -> TokenTree:
        """The step's tree from ``step_outputs`` (a sampled chain with its drafts' q's)."""
        kind = self.outputs_kind(ctx)
        if kind == "beam":
            return beam_from_tensors(outputs, beam_width(self.shape, self.vocab.size), self.shape.depth).tree
        if kind == "chain":
            return TokenTree(outputs[0], tuple(range(-1, self.verified)))
        chain, probs = outputs
        return TokenTree(chain, tuple(range(-1, probs.shape[0])), [None, *probs.unbind(0)])

    def tree_from_logits(self, ctx: StepContext, root: torch.Tensor, logits: torch.Tensor) -> TokenTree:
        """The step's tree from the drafting slots' logits (verified, N): a chain, or the beam tree of their top-k
        (a batch row's, ``methods.dflash.batch``)."""
        with ctx.counters.phase("drafter"):
            return self.tree_of(ctx, root, self.logits_outputs(ctx, root, logits, ctx.generator))

    def sampled_chain(self, ctx: StepContext, root: torch.Tensor, logits: torch.Tensor,
                      generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The block as a chain at T > 0 (the ``sampled`` convention): [root, a draw from each position's warped
        distribution] and those distributions over the target's vocabulary (zero outside the draft vocabulary), the
        verifier's q's."""
        probs = logits_to_probs(logits, ctx.sampling)
        tokens = self.vocab.to_target(sample_from_probs(probs, generator))
        return torch.cat([root.reshape(1), tokens.to(root.device)]), self.vocab.target_probs(probs)

    def beam(self, root: torch.Tensor, logits: torch.Tensor) -> BeamTree:
        """The positions' top-k as a beam tree: a node at depth d has position d + 1's best tokens below it."""
        logprobs = torch.log_softmax(logits.float(), dim=-1)

        def expand(frontier: Frontier) -> torch.Tensor:
            return logprobs[frontier.depth].expand(frontier.tokens.shape[0], -1)

        return grow_beam_tree(root, logprobs[0], expand, self.shape, self.vocab.token_map)

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        depths = tree.depths
        self.work.settle(ctx.counters, [depths[node] for node in verdict.path[1:]])
        self.pending = self._rows(target_out.hidden_states, index_on(verdict.path, target_out.logits.device))


def build(options: DFlashOptions, inputs: BuildInputs) -> DFlashAdapter:
    target = inputs.target
    return DFlashAdapter(load_drafter(inputs.drafter_dir, target.model), target, options)
