"""`eagle`: an EAGLE head drafting EAGLE-2 dynamic trees, verified by the shared verifier.

Each round the head first catches up on the accepted tokens, fed with the
target's true features (one forward over the pairs (f_p, x_{p+1}) it has not
seen); its last output gives the root's children. The tree then grows
beam-style (``harness.trees.beam``): the k best frontier nodes of a depth are
fed together, each with the predicted feature that produced it and with a tree
mask over the head's KV cache, and the budget's best nodes by cumulative
log-probability are verified. The head's cache keeps only the true-feature
prefix: entries of tree nodes (built on predicted features) are dropped after
verification, and the accepted tokens are re-fed with the target's features
next round, as EAGLE does.

Drafter FLOPs count as useful for the catch-up forward's context positions,
for its last position (whose output drafts depth 1) when a depth-1 node is
accepted, and for a tree node whose children included an accepted token
(``book_drafting_forward``).
"""

from __future__ import annotations

import copy
from functools import partial

from collections.abc import Callable, Hashable

import torch
from transformers import DynamicCache

from harness.analysis.metrics import PREFILL_TOKENS
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.drafting import beam_draws, parallel_chain
from harness.errors import DraftcountError
from harness.trees.beam import (
    BeamTree, Frontier, frontier_attention_bias, grow_beam_tree,
)
from harness.engine.counters import (DRAFTING_POSITION, DrafterWork, book_drafting_forward,
                                     count_useful_drafter_flops)
from harness.backend.forward import LMOutput, positions, run_drafter
from harness.backend.kv_cache import crop_cache
from harness.backend.models import LoadedModel, ModelCost
from harness.backend.device import index_on
from harness.trees.beam_shape import BeamShape
from harness.trees.tree import TokenTree
from methods.eagle import EagleOptions
from harness.verify.verdict import Verdict
from harness.engine.method_spec import BuildInputs
from harness.training.features import feature_indices, feature_rows
from methods.eagle.batch import EagleRows
from methods.eagle.checkpoint import load_head
from methods.eagle.head import EagleHead
from methods.eagle.head3 import Eagle3Head
from methods.eagle.graphed import graphed_propose, graphs_draft


class HeadRunner:
    """The head on the target's device and dtype, its FLOP cost, and the target's LM head for its logits."""

    def __init__(self, module: torch.nn.Module, target: LoadedModel, cost: ModelCost) -> None:
        self.module = module.to(target.device, target.dtype).eval()
        self.lm_head = target.model.get_output_embeddings()
        self.cost = cost
        self.device = target.device
        self.dtype = target.dtype
        self.token_map = module.draft_vocab.token_map  # draft ids -> target ids for the beam (None: the same)

    def logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        """Log-probabilities over the head's draft vocabulary (the target's unless it has one of its own)."""
        return torch.log_softmax(self.module.logits(hidden, self.lm_head).float(), dim=-1)


class EagleAdapter(AdapterBase):
    """The `eagle` adapter (see the module docstring)."""

    wants_target_hidden_states = True

    def __init__(self, head: EagleHead | Eagle3Head, target: LoadedModel, shape: BeamShape,
                 visual_tokens: str = "keep") -> None:
        self.runner = HeadRunner(head, target, head.cost(target.model.get_output_embeddings().weight.numel()))
        self.image_token = image_token_of(target) if visual_tokens == "drop" else None
        self.head = self.runner.module
        self.target_hidden_layers = feature_indices(head.features)
        self.shape = shape
        self.max_draft_nodes = shape.max_nodes
        self.details = {"top_k": shape.top_k, "depth": shape.depth, "budget": shape.budget, "drafts": shape.drafts,
                        "fusion": head.features.fusion, "feature_layers": list(head.features.layers),
                        "drafter_parameters": head.trainable_parameters(), "visual_tokens": visual_tokens,
                        "step_residuals": getattr(head, "residual_steps", 0), **head.draft_vocab.describe()}
        self._reset()

    def batch_row(self):
        """A copy for one row of a static batch: the drafter shared, the state reset by ``begin``."""
        row = copy.copy(self)
        return row

    def batch_drafting(self, count: int) -> EagleRows | None:
        """Every row of a static batch drafted at once (``methods.eagle.batch``) by the plain adapter; a variant
        that reads part of the prompt or overrides a step (HiViS ``drop``, `prism`, `dream`, P-EAGLE) drafts its
        rows one after another (``batch_row``)."""
        if type(self) is not EagleAdapter or self.image_token is not None:
            return None
        return EagleRows(self, count)

    def _reset(self, ctx: StepContext | None = None) -> None:
        lookahead = (self.shape.depth - 1) * self.shape.top_k + 1  # the tree's fed frontiers
        self.cache = (ctx.drafter_cache(self, self.head.config, lookahead, self.runner.dtype, self.runner.device)
                      if ctx is not None else DynamicCache(config=self.head.config))
        self.graphs = (ctx.drafter_graphs(self, self.head.config, self.runner.device, self.runner.dtype)
                       if ctx is not None else None)
        self.pending = torch.empty(0, device=self.runner.device)  # true features of positions fed_len.. not yet fed
        self.fed_len = 0
        # the prompt tokens the head reads, when not all of them
        self.kept_prompt = torch.empty(0, dtype=torch.long, device=self.runner.device)
        self.prompt_len = 0  # the prompt's length when the head reads part of it, else 0
        self.beam: BeamTree | None = None
        self.work = DrafterWork()  # nothing charged in an earlier (say, failed) generation carries over

    def _features(self, hidden_states: tuple[torch.Tensor | None, ...], index: torch.Tensor | slice) -> torch.Tensor:
        rows = [state[0, index] for state in feature_rows(hidden_states, self.head.features)]
        return self.head.input_features(rows)

    def step_head(self, step: int) -> tuple[Callable[..., torch.Tensor], Hashable]:
        """The network that runs draft step ``step`` (1: the catch-up forward, whose output drafts depth 1;
        d + 1: the expansion of the depth-d frontier, which drafts depth d + 1) and its CUDA-graph key: here the
        one head at every step, or with HiViS v2's step residuals the head told its step (one key per residual). A
        drafter with step-dependent modules (`prism`) overrides it."""
        index = getattr(self.head, "residual_index", lambda step: None)(step)
        if index is None:
            return self.head, "head"
        return partial(self.head, step=step), ("head", index)

    def _forward(self, ctx: StepContext, features: torch.Tensor, tokens: torch.Tensor, position_ids: torch.Tensor,
                 bias: torch.Tensor | None, logits_rows: int, step: int = 1, masks: int = 0,
                 embeds: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
        """The head over (features, tokens) at ``position_ids``; the last ``masks`` slots are P-EAGLE's mask slots
        (their inputs are placeholders the head replaces); ``embeds``, when given, stand in for the tokens'
        embeddings (``head_embeds``)."""
        past = self.cache.get_seq_length()
        head, key = self.step_head(step)
        extra = {"masks": masks} if masks else {}
        key = (key, masks) if masks else key

        inputs = {"features": features, "tokens": tokens, "position_ids": position_ids}
        if embeds is not None:
            inputs["embeds"] = embeds

        def call(inputs: dict[str, torch.Tensor], mask: torch.Tensor | None) -> torch.Tensor:
            own = {"embeds": inputs["embeds"][None]} if "embeds" in inputs else {}
            return head(inputs["features"][None], inputs["tokens"][None], inputs["position_ids"], self.cache,
                        mask, **extra, **own)[0]

        with ctx.counters.phase("drafter"):
            hidden = run_drafter(call, self.cache, inputs, tokens.shape[0], bias, self.runner.dtype, self.graphs,
                                 key=key)
        flops = self.runner.cost.forward_flops(tokens.shape[0], past + tokens.shape[0], logits_rows)
        ctx.counters.drafter.add(tokens.shape[0], flops)
        return hidden, flops

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self._reset(ctx)
        kept = self.head_positions(ctx, prompt_ids, prefill)
        ctx.counters.add_extra(PREFILL_TOKENS, prompt_ids.shape[-1] if kept is None else kept.shape[0])
        if kept is None:
            self.pending = self._features(prefill.hidden_states, slice(None))
            return
        self.pending = self._features(prefill.hidden_states, kept.to(self.runner.device))
        self.kept_prompt, self.prompt_len = prompt_ids[0, kept.to(prompt_ids.device)], prompt_ids.shape[-1]

    def head_positions(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> torch.Tensor | None:
        """The prompt positions the head reads after the prefill: all of them (None), or with ``visual_tokens=drop``
        (HiViS) the text positions alone. A drafter that keeps part of an image (`dream`) overrides it."""
        if self.image_token is None:
            return None
        return (prompt_ids[0] != self.image_token).nonzero().flatten()

    def head_tokens(self, sequence: torch.Tensor, start: int, count: int) -> torch.Tensor:
        """The head's input tokens ``start``..``start + count`` of its own sequence: the target's, or when it reads
        part of the prompt (``head_positions``) the kept prompt tokens followed by every token after the prompt."""
        if not self.prompt_len:
            return sequence[0, start : start + count]
        kept = self.kept_prompt.shape[0]
        if start >= kept:  # past the prompt (every step after the first): a slice, no copy of the sequence
            shift = self.prompt_len - kept
            return sequence[0, start + shift : start + shift + count]
        own = torch.cat([self.kept_prompt.to(sequence.device), sequence[0, self.prompt_len:]])
        return own[start : start + count]

    def head_embeds(self, start: int, tokens: torch.Tensor) -> torch.Tensor | None:
        """Input embeddings for the head's tokens from ``start`` of its own sequence, or None (the head embeds its
        tokens itself). A drafter that reads the target's prompt embeddings (`dream`: an image's) overrides it."""
        return None

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        count = self.pending.shape[0]
        if graphs_draft(self, ctx, count):  # the whole draft as one graph (``methods.eagle.graphed``)
            return graphed_propose(self, ctx, sequence)
        tokens = self.head_tokens(sequence, self.fed_len + 1, count)
        hidden, flops = self._forward(
            ctx, self.pending, tokens, positions(self.fed_len, count, self.runner.device), None, logits_rows=1, step=1,
            embeds=self.head_embeds(self.fed_len + 1, tokens),
        )
        book_drafting_forward(ctx.counters, self.work, flops, count)  # its last position drafts depth 1
        self.fed_len += count
        root_hidden = hidden[-1]
        outputs: list[torch.Tensor] = []  # per expanded depth: the head's outputs for that frontier
        frontiers: list[Frontier] = []

        def expand(frontier: Frontier) -> torch.Tensor:
            frontiers.append(frontier)
            k = frontier.tokens.shape[0]
            inputs = root_hidden.expand(k, -1) if not outputs else outputs[-1].index_select(0, frontier.parent_rows)
            bias = frontier_attention_bias(frontiers, self.fed_len, self.runner.dtype)
            position_ids = torch.full((1, k), self.fed_len + frontier.depth - 1, device=self.runner.device)
            out, cost = self._forward(ctx, inputs, frontier.tokens, position_ids, bias, logits_rows=k,
                                      step=frontier.depth + 1)
            self.work.charge([(frontier.depth, row) for row in range(k)], cost)
            outputs.append(out)
            with ctx.counters.phase("drafter"):
                return self.runner.logprobs(out)

        with ctx.counters.phase("drafter"):
            root_logprobs = self.runner.logprobs(root_hidden)
        self.beam = grow_beam_tree(sequence[0, -1], root_logprobs, expand, self.shape, self.runner.token_map,
                                   beam_draws(ctx, self.shape))
        return self.beam.tree

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        self.work.settle(ctx.counters, beam_useful(self.beam, verdict))
        crop_cache(self.cache, self.fed_len)  # drop the tree nodes' entries: they were built on predicted features
        index = index_on(verdict.path, target_out.logits.device)
        self.pending = self._features(target_out.hidden_states, index)


def beam_useful(beam: BeamTree, verdict: Verdict) -> list:
    """The work units a beam round's verdict made useful: the expanded frontier slot of every accepted node's parent,
    and the drafting position (``book_drafting_forward``) once a depth-1 node is accepted. Nodes past the beam's were
    added to the tree by a composing method (reader): their drafter's work is not this one's."""
    slots = beam.parent_slots
    useful = [slots[node] for node in verdict.path[1:] if node < len(slots)]
    return useful + [DRAFTING_POSITION] if len(verdict.path) > 1 and verdict.path[1] < len(slots) else useful


def image_token_of(target: LoadedModel) -> int:
    """A vision-language target's image placeholder token (``visual_tokens=drop``), or a one-line refusal."""
    token = getattr(target.model.config, "image_token_index", None)
    if token is None:
        raise DraftcountError("eagle: visual_tokens=drop (HiViS) needs a vision-language target with an image "
                              "placeholder token (image_token_index); this target has none")
    return int(token)


class ParallelEagleAdapter(EagleAdapter):
    """P-EAGLE (vLLM's ``parallel_drafting`` for EAGLE heads): the catch-up forward over the accepted tokens also
    reads k - 1 mask slots (the head's learned mask embedding and feature, at the next positions), so ONE forward
    drafts a chain of k: draft 1 from the last accepted slot, draft j + 1 from mask j. Each draft is drawn from the
    distribution it carries to the verifier (exact speculative sampling along the chain); the masks' cache entries
    are dropped after the forward, and a mask's FLOPs are useful iff its draft is accepted."""

    def __init__(self, head: EagleHead, target: LoadedModel, k: int) -> None:
        super().__init__(head, target, BeamShape(top_k=1, depth=k, budget=k))
        self.k = k
        self.details = {**self.details, "parallel": k}

    def batch_row(self):
        raise DraftcountError("eagle with `parallel` (P-EAGLE) decodes one request at a time (batch size 1)")

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        count, masks = self.pending.shape[0], self.k - 1
        tokens = sequence[0, self.fed_len + 1 : self.fed_len + 1 + count]
        features = torch.cat([self.pending, self.pending.new_zeros(masks, self.pending.shape[-1])])
        slot_tokens = torch.cat([tokens, tokens.new_zeros(masks)])  # the mask slots' inputs are replaced
        hidden, flops = self._forward(ctx, features, slot_tokens, positions(self.fed_len, count + masks,
                                                                            self.runner.device),
                                      None, logits_rows=self.k, step=1, masks=masks)
        per_slot = flops / (count + masks)
        count_useful_drafter_flops(ctx.counters, per_slot * (count - 1))  # the accepted tokens' entries: kept
        self.work.charge([1], per_slot)  # the last one's output is draft 1: useful iff it is accepted
        self.fed_len += count
        crop_cache(self.cache, self.fed_len)  # the mask slots' entries go
        with ctx.counters.phase("drafter"):
            logits = self.head.draft_vocab.target_logits(self.head.logits(hidden[count - 1:], self.runner.lm_head))
            return parallel_chain(sequence[0, -1], logits, ctx, self.work, per_slot)

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        self.work.settle(ctx.counters, verdict.path[1:])
        index = index_on(verdict.path, target_out.logits.device)
        self.pending = self._features(target_out.hidden_states, index)


def build(options: EagleOptions, inputs: BuildInputs) -> EagleAdapter:
    target = inputs.target
    head = load_head(inputs.drafter_dir, target.model)
    if not options.parallel:
        return EagleAdapter(head, target, options.shape(), options.visual_tokens)
    if not getattr(head, "parallel", False):
        raise DraftcountError(f"eagle: option `parallel` needs a head trained for it (P-EAGLE's mask inputs); "
                              f"{inputs.drafter_dir} has none (train one with --opt parallel=K)")
    return ParallelEagleAdapter(head, target, options.parallel)
