"""Training a Lyanna drafter: ``python -m harness train --method lyanna --target T --data D --out DIR``.

Unrolled K-step hidden-state autoregression, as at inference: step 0 feeds the
backbone the target's true features; step k feeds it its own outputs of step
k-1, with the attention mask of drafting k positions ahead of the true prefix
(``unrolled_step_bias``). At every step the output at position p, injected
with its parent token x_{p+1}, is trained by soft cross-entropy against the
target's distribution softmax(lm_head(f_{p+1})) (restricted to the kept
vocabulary), weighted by ``step_decay``**k, plus optional smooth-L1 regression
of the state onto f_{p+1}. Same data, loop and checkpoints as the EAGLE head.

Vocabulary compression: ``draft_vocab: N`` (or ``vocab_fraction``: N as a share of the target's vocabulary) keeps the
N most frequent training tokens (``harness.training.draft_vocab``).

``init=<drafter dir>`` starts from a trained drafter (its architecture and draft vocabulary replace the
architecture options); ``objective: gto`` then adds Group Tree Optimization (``harness.training.gto``) against a
frozen copy of it, with the hooks ``LYANNA_GTO``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from harness.training.draft_vocab import check_init_vocab, choose_draft_vocab
from harness.training.drafters import (
    budgeted,
    DrafterTrainRequest, Fitted, feature_source, fit_drafter, frozen_target, train_drafter,
)
from harness.training.unroll import shift_right, unrolled_forward, unrolled_step_mask
from harness.backend.forward import causal_bias, positions
from harness.backend.kv_cache import new_cache
from harness.backend.models import LoadedModel
from harness.trees.beam_shape import BeamShape
from harness.training.gto import GtoHooks, GtoTrainOptions, RowTarget, prefix_cache, with_gto
from harness.training.objectives import token_loss
from harness.training.features import FeatureSource, feature_rows, layer_key
from harness.options import parse_options
from harness.training.features import choose_features
from methods.lyanna.adapter import LyannaAdapter, LyannaOptions
from methods.lyanna.model import LyannaArch, LyannaModel, load_drafter, new_drafter, save_drafter


@dataclass(frozen=True)
class LyannaTrainOptions(GtoTrainOptions):
    inject: Literal["token_info", "feature"] = "token_info"
    rank: int = 64
    fusion: Literal["none", "eagle3"] = "none"
    feature_layers: tuple[str, ...] = ()
    intermediate_size: int = 0  # backbone MLP width; 0 = the target's (the EAGLE head's)
    parent_vocab: Literal["draft", "full"] = "draft"  # token-info rows: the draft vocabulary (+1 shared) or every token
    vocab_fraction: float = 1.0  # < 1: draft_vocab as a share of the target's vocabulary (round(V x fraction))
    unroll_steps: int = 5
    step_decay: float = 0.8
    regression_weight: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.vocab_fraction <= 1:
            raise ValueError(f"vocab_fraction must be in (0, 1], got {self.vocab_fraction}")
        if self.vocab_fraction < 1 and self.draft_vocab:
            raise ValueError("give draft_vocab or vocab_fraction, not both")
        if self.unroll_steps < 1:
            raise ValueError(f"unroll_steps must be >= 1, got {self.unroll_steps}")


def unrolled_states(drafter: LyannaModel, batch: dict[str, torch.Tensor], steps: int) -> list[torch.Tensor]:
    """Backbone outputs (B, T-1, H) of each unrolled step; the output at p predicts f_{p+1}."""
    inputs = drafter.true_inputs([batch[layer_key(layer)][:, :-1] for layer in drafter.arch.features.layers])
    return unrolled_forward(drafter, inputs, lambda out: drafter.own_inputs(shift_right(out)), steps, drafter.config)


def lyanna_loss(drafter: LyannaModel, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
                options: LyannaTrainOptions) -> torch.Tensor:
    following = batch["last"][:, 1:]
    parents = batch["input_ids"][:, 1:]
    target_probs = drafter.draft_vocab.next_token_probs(lm_head, following)
    total = following.new_zeros(())
    for step, out in enumerate(unrolled_states(drafter, batch, options.unroll_steps)):
        mask = unrolled_step_mask(out, step)
        loss = token_loss(options.objective)(drafter.node_logits(out, parents), target_probs, mask)
        if options.regression_weight > 0:
            regression = F.smooth_l1_loss(out, following, reduction="none").mean(-1)
            loss = loss + options.regression_weight * (regression * mask).sum() / mask.sum()
        total = total + options.step_decay**step * loss
    return total


@torch.no_grad()
def depth_agreement(drafter: LyannaModel, lm_head: torch.nn.Module, batch: dict[str, torch.Tensor],
                    steps: int) -> list[float]:
    """Per depth: how often the drafter's top-1 (parent injected) equals the target's."""
    wanted = lm_head(batch["last"][:, 1:]).argmax(-1)
    parents = batch["input_ids"][:, 1:]
    agreement = []
    for step, out in enumerate(unrolled_states(drafter, batch, steps)):
        chosen = drafter.draft_vocab.to_target(drafter.node_logits(out, parents).argmax(-1))
        agreement.append(float((chosen == wanted)[:, step:].float().mean()))
    return agreement


# GTO's hooks: the backbone's catch-up over a row's true features, and a path's log-probability along its chain.

@dataclass
class ChainState:
    """A drafter after reading a row's true inputs: its outputs (1, T-1, H), cache and the row's tokens."""

    outputs: torch.Tensor
    cache: DynamicCache
    tokens: torch.Tensor


def chain_catch_up(drafter: LyannaModel, row: RowTarget) -> ChainState:
    rows = feature_rows(row.output.hidden_states, drafter.arch.features)
    inputs = drafter.true_inputs([state[:, :-1] for state in rows])
    count = inputs.shape[1]
    cache = new_cache(drafter.config)
    outputs = drafter(inputs, positions(0, count, inputs.device), cache, causal_bias(0, count, inputs.dtype,
                                                                                     inputs.device))
    return ChainState(outputs, cache, row.tokens)


def chain_path_logprob(drafter: LyannaModel, state: ChainState, prefix_len: int, tokens: torch.Tensor) -> torch.Tensor:
    """log M(tokens) below root x_{prefix_len}: depth d's state is the backbone fed its own depth d-1 state at
    position prefix_len + d - 2 (depth 1: the catch-up's), injected with the node's parent token, as the adapter
    drafts (on a first round: nothing reused)."""
    total = state.outputs.new_zeros((), dtype=torch.float32)
    cache = prefix_cache(state.cache, prefix_len, drafter.config)
    hidden = state.outputs[0, prefix_len - 1]
    parent = state.tokens[prefix_len]
    for index, token in enumerate(tokens):
        if index > 0:
            position = torch.full((1, 1), prefix_len + index - 1, device=hidden.device)
            hidden = drafter(drafter.own_inputs(hidden[None, None]), position, cache, None)[0, 0]
        logprobs = torch.log_softmax(drafter.node_logits(hidden, parent).float(), dim=-1)
        total = total + drafter.draft_vocab.target_logits(logprobs)[token]
        parent = token
    return total


def lyanna_adapter(drafter: torch.nn.Module, target: LoadedModel, shape: BeamShape) -> LyannaAdapter:
    return LyannaAdapter(drafter, target, LyannaOptions(top_k=shape.top_k, depth=shape.depth, budget=shape.budget))


LYANNA_GTO = GtoHooks(adapter=lyanna_adapter, catch_up=chain_catch_up, path_logprob=chain_path_logprob)


def fresh_drafter(options: LyannaTrainOptions, target: LoadedModel, source: FeatureSource) -> LyannaModel:
    """A new drafter, its architecture and vocabulary from the options."""
    layers = choose_features(options.fusion, options.feature_layers, target.config.num_hidden_layers).layers
    vocab = target.vocab_size
    size = options.draft_vocab or (max(1, round(vocab * options.vocab_fraction)) if options.vocab_fraction < 1 else 0)
    draft_vocab = choose_draft_vocab(size, source, target)
    arch = LyannaArch(options.inject, options.rank, options.fusion, layers, options.intermediate_size,
                      options.parent_vocab)
    return new_drafter(target.model, arch, draft_vocab, options.seed).to(target.device)


def train_lyanna(request: DrafterTrainRequest) -> dict:
    """Train (or, with 0 steps, just initialise) a Lyanna drafter and save it to ``request.out``; with ``init``,
    fine-tune a trained one (``objective: gto``: by Group Tree Optimization against a frozen copy of it)."""
    options = parse_options(LyannaTrainOptions, request.options, "lyanna training")
    request = budgeted(request, options)
    target = frozen_target(request)
    init = load_drafter(Path(options.init), target.model).to(target.device).train() if options.init else None
    if init is not None:
        layers = list(init.arch.features.layers)
    else:
        layers = choose_features(options.fusion, options.feature_layers, target.config.num_hidden_layers).layers
    source = feature_source(request, target, list(dict.fromkeys([*layers, "last"])), options.seq_len)
    drafter = init if init is not None else fresh_drafter(options, target, source)
    if init is not None:
        check_init_vocab(options.draft_vocab, init.draft_vocab, options.init)
    lm_head = target.model.get_output_embeddings()
    batch_loss = with_gto(lambda batch: lyanna_loss(drafter, lm_head, batch, options), LYANNA_GTO, drafter, target,
                          options)
    own = {"backbone_intermediate_size": drafter.config.intermediate_size, "kept_vocabulary": drafter.draft_vocab.size}
    return train_drafter(request, options, target, source,
                         lambda: Fitted(drafter, fit_drafter(drafter, batch_loss, source, target, request, options), own),
                         lambda module, batch: depth_agreement(module, lm_head, batch, options.unroll_steps),
                         save_drafter)
