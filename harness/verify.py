"""The shared verifier: greedy and lossless sampling verification of a token tree.

A chain is a tree of width one, an autoregressive step a tree with only its
root: all go through ``verify_tree``.

Sampling (multi-draft speculative sampling, as in SpecInfer / EAGLE): at a
node with target distribution p, its children are tried in order; child x
drawn from q is accepted with probability min(1, p(x)/q(x)); on rejection
p <- norm(max(0, p - q)) and the next child is tried. A deterministic draft
(q = None) counts as q = one-hot(x). When every child is rejected, the bonus
token is drawn from what is left of p. With children drawn independently from
q (with replacement), or from q with earlier siblings removed (without
replacement, the drafter then supplies that reduced q), the output follows the
target's distribution exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.sampling import SamplingConfig, logits_to_probs, residual_distribution, sample_from_probs
from harness.tree import TokenTree

ResidualFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Verdict:
    """What verification decided.

    path: accepted node indices from the root (root included), so
        ``len(path) - 1`` draft tokens were accepted.
    accepted_tokens: the tokens of path[1:].
    bonus_token: the token the target adds after the last accepted node.
    tried: draft nodes whose acceptance test ran (for waste accounting).
    """

    path: tuple[int, ...]
    accepted_tokens: tuple[int, ...]
    bonus_token: int
    tried: int

    @property
    def num_accepted(self) -> int:
        return len(self.path) - 1

    @property
    def new_tokens(self) -> tuple[int, ...]:
        return (*self.accepted_tokens, self.bonus_token)


Verifier = Callable[..., Verdict]


def verify_tree(
    tree: TokenTree,
    logits: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    residual: ResidualFn = residual_distribution,
) -> Verdict:
    """Verify ``tree`` against the target's ``logits`` (n, V), one row per tree node."""
    if logits.shape[0] != tree.size:
        raise ValueError(f"need one row of logits per tree node ({tree.size}), got {logits.shape[0]}")
    if sampling.is_greedy:
        return _verify_greedy(tree, logits)
    return _verify_sampling(tree, logits, sampling, generator, residual)


def _verify_greedy(tree: TokenTree, logits: torch.Tensor) -> Verdict:
    # the step's one host read: the tree's tokens and the target's choices together (and a deferred tree's shape)
    tokens, target_choice = tree.read_with([tree.tokens.to(logits.device), logits.argmax(dim=-1)])
    children = tree.children
    node, path, tried = 0, [0], 0
    while True:
        wanted = target_choice[node]
        match = None
        for child in children[node]:
            tried += 1
            if tokens[child] == wanted:
                match = child
                break
        if match is None:
            return Verdict(tuple(path), tuple(tokens[i] for i in path[1:]), wanted, tried)
        node = match
        path.append(node)


def _verify_sampling(
    tree: TokenTree,
    logits: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    residual: ResidualFn,
) -> Verdict:
    (tokens,) = tree.read_with([tree.tokens])
    children = tree.children
    node, path, tried = 0, [0], 0
    while True:
        target = logits_to_probs(logits[node], sampling)
        accepted_child = None
        for child in children[node]:
            tried += 1
            token = tokens[child]
            draft = tree.draft_probs[child]
            draft_mass = draft[token] if draft is not None else target.new_ones(())
            threshold = torch.rand((), generator=generator, device=target.device) * draft_mass
            if bool(threshold < target[token]):
                accepted_child = child
                break
            if draft is None:
                draft = torch.zeros_like(target)
                draft[token] = 1.0
            target = residual(target, draft)
        if accepted_child is None:
            bonus = int(sample_from_probs(target, generator).item())
            return Verdict(tuple(path), tuple(tokens[i] for i in path[1:]), bonus, tried)
        node = accepted_child
        path.append(node)
