"""GTO, Group Tree Optimization (arXiv 2509.22134; SEEDS.md section 7): a tree-level drafter-training loss.

It fine-tunes a trained drafter (``init=``) against a frozen copy of it (the reference). For each training row,
``gto_groups`` groups of ``gto_group_size`` adjacent prefixes x_{0..t} (root x_t) are drawn. For every prefix the
current and the reference drafter each grow the tree they would draft at decode time (their own adapter, so the
EAGLE-2 beam policy of ``harness.trees.beam``, driven on the prefix), and one target forward over each tree (tree
mask, on the target's cache of the prefix) scores it:

- expected acceptance length of a branch S_i: L_i = sum_j prod_{k<=j} T(x_k | prefix, x_<k);
- tree reward r = logsumexp_i L_i (eta = 1); debiased R = r(current) - r(reference);
- group-standardised advantage A = (R - mean_G R) / (std_G R + delta);
- ratio s = exp((log M(path) - log M0(path)) / max(len, 1)) on the current tree's longest path that greedy
  verification accepts, with log M differentiable (teacher-forced along the path, the drafter fed its own
  states as at decode time);
- L_GTO = -(1/m) sum_G min(s A, clip(s, 1 - eps, 1 + eps) A), averaged over groups and rows.

A trainer adds ``gto_weight * gto_loss(...)`` to its token loss. What differs between drafters is a narrow hook
(``GtoHooks``): its decode-time adapter, its differentiable catch-up over a row, and a path's log-probability.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch
from torch import nn
from transformers import DynamicCache, PretrainedConfig

from harness.backend.forward import ForwardTally, LMOutput, positions, run_model
from harness.backend.kv_cache import new_cache
from harness.backend.models import LoadedModel
from harness.engine.adapter import DraftAdapter, StepContext
from harness.engine.counters import GenerationCounters
from harness.errors import DraftcountError
from harness.trees.beam_shape import BeamShape
from harness.trees.tree import TokenTree, children_of
from harness.training.drafters import DrafterLoopOptions
from harness.training.objectives import uses_tree_loss
from harness.verify.sampling import SamplingConfig

State = TypeVar("State")


@dataclass(frozen=True)
class GtoTrainOptions(DrafterLoopOptions):
    """Loop options plus what ``objective: gto`` reads; a drafter trainer's options extend this to offer GTO."""

    init: str = ""  # a trained drafter directory to start from (and, frozen, GTO's reference); required for gto
    gto_group_size: int = 4  # m: adjacent prefixes per group
    gto_groups: int = 1  # K: groups per training row
    gto_top_k: int = 4  # the decoding tree grown at training time (EAGLE-2 beam)
    gto_depth: int = 4
    gto_budget: int = 16
    gto_eps: float = 0.2  # PPO clip range
    gto_delta: float = 1e-6  # advantage standardisation
    gto_weight: float = 0.5  # omega: total = token loss + omega * L_GTO
    gto_rows: int = 2  # rows of each micro-batch the tree loss runs on (0: all); the token loss sees all

    def __post_init__(self) -> None:
        super().__post_init__()
        if uses_tree_loss(self.objective) and not self.init:
            raise DraftcountError(f"objective {self.objective} fine-tunes a trained drafter: "
                                  "give init=<trained drafter directory>")
        if self.gto_group_size < 1 or self.gto_groups < 1 or self.gto_rows < 0:
            raise DraftcountError(f"gto_group_size and gto_groups must be >= 1 and gto_rows >= 0, got "
                                  f"{self.gto_group_size}, {self.gto_groups} and {self.gto_rows}")
        if not 0 <= self.gto_eps < 1 or self.gto_delta <= 0 or self.gto_weight < 0:
            raise DraftcountError(f"need 0 <= gto_eps < 1, gto_delta > 0, gto_weight >= 0; got {self.gto_eps}, "
                                  f"{self.gto_delta}, {self.gto_weight}")
        self.gto_shape  # checks the tree's shape

    @property
    def gto_shape(self) -> BeamShape:
        return BeamShape(self.gto_top_k, self.gto_depth, self.gto_budget)


# ---- rewards, advantages and the clipped surrogate: pure functions ----

def branches(parents: tuple[int, ...]) -> list[list[int]]:
    """Each root-to-leaf branch as its node indices below the root (leaves in node order)."""
    children = children_of(parents)
    out = []
    for leaf in range(1, len(parents)):
        if children[leaf]:
            continue
        path, node = [], leaf
        while node > 0:
            path.append(node)
            node = parents[node]
        out.append(path[::-1])
    return out


def expected_acceptance_lengths(node_probs: torch.Tensor, parents: tuple[int, ...]) -> torch.Tensor:
    """(branches,) L_i = sum_j prod_{k<=j} T(x_k) along each branch; ``node_probs`` (n,) holds each node's target
    probability given its ancestors (the root's entry is ignored)."""
    reach = node_probs.new_ones(len(parents))  # prod of T over a node's path below the root
    for node in range(1, len(parents)):
        reach[node] = reach[parents[node]] * node_probs[node]
    paths = branches(parents)
    if not paths:
        return node_probs.new_zeros(1)
    return torch.stack([reach[path].sum() for path in paths])


def tree_reward(lengths: torch.Tensor) -> torch.Tensor:
    """r = logsumexp of the branches' expected acceptance lengths (eta = 1: a smooth max)."""
    return torch.logsumexp(lengths, dim=0)


def group_advantages(current: torch.Tensor, reference: torch.Tensor, delta: float) -> torch.Tensor:
    """A = (R - mean R) / (std R + delta) over a group, with R = r(current) - r(reference) (population std)."""
    debiased = current - reference
    return (debiased - debiased.mean()) / (debiased.std(unbiased=False) + delta)


def path_ratio(logprob: torch.Tensor, reference_logprob: torch.Tensor, length: int) -> torch.Tensor:
    """s = exp((log M(path) - log M0(path)) / max(length, 1))."""
    return torch.exp((logprob - reference_logprob) / max(length, 1))


def clipped_surrogate(ratios: torch.Tensor, advantages: torch.Tensor, eps: float) -> torch.Tensor:
    """L = -(1/m) sum min(s A, clip(s, 1 - eps, 1 + eps) A): PPO's clipped objective, as a loss."""
    clipped = ratios.clamp(1 - eps, 1 + eps)
    return -torch.minimum(ratios * advantages, clipped * advantages).mean()


def longest_accepted_path(tokens: list[int], parents: tuple[int, ...], greedy: list[int]) -> list[int]:
    """Nodes (below the root) greedy verification accepts: from the root, the child whose token is the target's
    argmax at its parent (``greedy[node]``), down as far as one exists."""
    children = children_of(parents)
    path, node = [], 0
    while True:
        match = next((child for child in children[node] if tokens[child] == greedy[node]), None)
        if match is None:
            return path
        path.append(match)
        node = match


def group_starts(length: int, group_size: int, groups: int, seed: int) -> list[list[int]]:
    """``groups`` non-overlapping runs of ``group_size`` adjacent prefix ends t in [1, length - 1] (the root is
    x_t, the prefix x_0..x_{t-1}), drawn from ``seed``; fewer when the row is too short."""
    usable = length - 1  # t = 1 .. length - 1
    groups = min(groups, usable // group_size)
    if groups == 0:
        return [list(range(1, length))] if length > 1 else []
    slack = usable - groups * group_size
    generator = torch.Generator(device="cpu").manual_seed(seed)  # host: draws prefix ends, read as lists
    # host: weights of the host draw
    gaps = torch.multinomial(torch.ones(groups + 1), slack, replacement=True, generator=generator) if slack else None
    extra = torch.bincount(gaps, minlength=groups + 1).tolist() if gaps is not None else [0] * (groups + 1)
    out, start = [], 1
    for index in range(groups):
        start += extra[index]
        out.append(list(range(start, start + group_size)))
        start += group_size
    return out


# ---- the target's view of a row and of a tree ----

def prefix_cache(cache: DynamicCache, length: int, config: PretrainedConfig) -> DynamicCache:
    """A new cache holding the first ``length`` positions of ``cache`` (which stays whole; gradients flow)."""
    out = new_cache(config)
    for index, layer in enumerate(cache.layers):
        out.update(layer.keys[..., :length, :], layer.values[..., :length, :], index)
    return out


@dataclass
class RowTarget:
    """The target's forward over one training row x_0..x_{T-1}: its cache, logits and hidden states (1, T, .)."""

    target: LoadedModel
    tokens: torch.Tensor  # (T,)
    cache: DynamicCache
    output: LMOutput

    def prefix_cache(self, length: int) -> DynamicCache:
        return prefix_cache(self.cache, length, self.target.model.config)

    def prefill(self, length: int) -> LMOutput:
        """What a prefill of x_0..x_{length-1} returns (causal: a slice of the row's forward)."""
        states = tuple(None if state is None else state[:, :length] for state in self.output.hidden_states)
        return LMOutput(logits=self.output.logits[:, :length], hidden_states=states)


@torch.no_grad()
def row_target(target: LoadedModel, tokens: torch.Tensor) -> RowTarget:
    cache = new_cache(target.model.config)
    output = run_model(target, tokens[None], cache, positions(0, tokens.shape[0], tokens.device), ForwardTally(),
                       output_hidden_states=True)
    return RowTarget(target, tokens, cache, output)


@dataclass(frozen=True)
class TreeScore:
    node_probs: torch.Tensor  # (n,) each node's target probability given its ancestors (root: 1)
    greedy: list[int]  # per node, the target's argmax after it


@torch.no_grad()
def score_tree(row: RowTarget, prefix_len: int, tree: TokenTree) -> TreeScore:
    """One target forward over ``tree`` (root x_{prefix_len}) on the cache of the prefix, with the tree mask."""
    target = row.target
    out = run_model(target, tree.tokens[None].to(target.device), row.prefix_cache(prefix_len),
                    tree.position_ids(prefix_len).to(target.device), ForwardTally(),
                    attention_bias=tree.attention_bias(target.dtype))
    probs = torch.softmax(out.logits[0].float(), dim=-1)
    parents = torch.tensor(tree.parents, device=probs.device).clamp(min=0)
    node_probs = probs[parents, tree.tokens.to(probs.device)]
    node_probs[0] = 1.0
    return TreeScore(node_probs, probs.argmax(-1).tolist())


def decoding_tree(adapter: DraftAdapter, row: RowTarget, prefix_len: int) -> TokenTree:
    """The tree ``adapter`` drafts after prefix x_0..x_{prefix_len-1} with root x_{prefix_len}: its decode-time
    begin (prefill) and propose, on a fresh context."""
    ctx = StepContext(sampling=SamplingConfig(), generator=None, counters=GenerationCounters(),
                      target_vocab_size=row.target.vocab_size)
    with torch.no_grad():
        adapter.begin(ctx, row.tokens[None, :prefix_len], row.prefill(prefix_len))
        tree = adapter.propose(ctx, row.tokens[None, : prefix_len + 1])
    tree.resolve()
    return tree


# ---- the per-drafter hook and the loss ----

@dataclass(frozen=True)
class GtoHooks(Generic[State]):
    """What GTO needs from a drafter.

    adapter(module, target, shape): its decode-time adapter drafting beam trees of ``shape`` with ``module``.
    catch_up(module, row): differentiable state of the module after reading the whole row's true features.
    path_logprob(module, state, prefix_len, tokens): log M(tokens | x_0..x_{prefix_len}) of a path of draft
        tokens below root x_{prefix_len}, teacher-forced along the path with the drafter's own fed-back states.
    """

    adapter: Callable[[nn.Module, LoadedModel, BeamShape], DraftAdapter]
    catch_up: Callable[[nn.Module, RowTarget], State]
    path_logprob: Callable[[nn.Module, State, int, torch.Tensor], torch.Tensor]


def keeping_mode(module: nn.Module, make: Callable[[], DraftAdapter]) -> DraftAdapter:
    """``make()`` (an adapter puts its module in eval mode), with ``module``'s training mode restored."""
    training = module.training
    adapter = make()
    module.train(training)
    return adapter


def gto_loss(hooks: GtoHooks, current: nn.Module, reference: nn.Module, target: LoadedModel,
             input_ids: torch.Tensor, options: GtoTrainOptions) -> torch.Tensor:
    """L_GTO of the first ``gto_rows`` rows of a batch (B, T): the mean over rows and groups of the clipped
    surrogate."""
    shape = options.gto_shape
    current_adapter = keeping_mode(current, lambda: hooks.adapter(current, target, shape))
    reference_adapter = hooks.adapter(reference, target, shape)
    losses = []
    for tokens in input_ids[: options.gto_rows or None]:
        row = row_target(target, tokens)
        state = hooks.catch_up(current, row)
        with torch.no_grad():
            reference_state = hooks.catch_up(reference, row)
        seed = int(tokens.long().sum()) * 1009 + tokens.shape[0]
        for group in group_starts(tokens.shape[0], options.gto_group_size, options.gto_groups, seed):
            rewards, reference_rewards, ratios = [], [], []
            for prefix_len in group:
                tree = decoding_tree(current_adapter, row, prefix_len)
                score = score_tree(row, prefix_len, tree)
                rewards.append(tree_reward(expected_acceptance_lengths(score.node_probs, tree.parents)))
                reference_tree = decoding_tree(reference_adapter, row, prefix_len)
                reference_score = score_tree(row, prefix_len, reference_tree)
                reference_rewards.append(tree_reward(expected_acceptance_lengths(reference_score.node_probs,
                                                                                 reference_tree.parents)))
                path = longest_accepted_path(tree.tokens.tolist(), tree.parents, score.greedy)
                path_tokens = tree.tokens[path].to(target.device)
                logprob = hooks.path_logprob(current, state, prefix_len, path_tokens)
                with torch.no_grad():
                    reference_logprob = hooks.path_logprob(reference, reference_state, prefix_len, path_tokens)
                ratios.append(path_ratio(logprob, reference_logprob, len(path)))
            advantages = group_advantages(torch.stack(rewards), torch.stack(reference_rewards), options.gto_delta)
            losses.append(clipped_surrogate(torch.stack(ratios), advantages, options.gto_eps))
    if not losses:
        return input_ids.new_zeros((), dtype=torch.float32)
    return torch.stack(losses).mean()


def frozen_reference(module: nn.Module) -> nn.Module:
    """The reference drafter: a copy of ``module`` (the ``init`` drafter, before any training step), frozen and in
    eval mode."""
    return copy.deepcopy(module).requires_grad_(False).eval()


def with_gto(token_loss: Callable[[dict[str, torch.Tensor]], torch.Tensor], hooks: GtoHooks, module: nn.Module,
             target: LoadedModel, options: GtoTrainOptions) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    """A trainer's batch loss under its objective: ``token_loss`` alone, or (``objective: gto``) plus
    ``gto_weight`` x the GTO loss of ``module`` against a frozen copy of it as it is now (called before training:
    the ``init`` drafter it starts from, which ``GtoTrainOptions`` requires for gto)."""
    if not uses_tree_loss(options.objective):
        return token_loss
    reference = frozen_reference(module)

    def batch_loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return token_loss(batch) + options.gto_weight * gto_loss(hooks, module, reference, target,
                                                                 batch["input_ids"], options)

    return batch_loss
