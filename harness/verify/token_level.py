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
from functools import lru_cache

import torch

from harness.verify.sampling import SamplingConfig, logits_to_probs, residual_distribution, sample_from_probs
from harness.backend.device import index_on
from harness.trees.tree import TokenTree, children_of
from harness.verify.verdict import Verdict, check_one_row_per_node

ResidualFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Draws = tuple[torch.Tensor, torch.Tensor]  # per node: accepted (1/0, long), and the bonus token drawn there


def verify_tree(
    tree: TokenTree,
    logits: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    residual: ResidualFn = residual_distribution,
    choices: torch.Tensor | None = None,
    draws: Draws | None = None,
) -> Verdict:
    """Verify ``tree`` against the target's ``logits`` (n, V), one row per tree node; ``choices``: the logits'
    argmax per row when the target's graphed forward already made it (``LMOutput.choices``), used when greedy;
    ``draws``: the sampling tests' outcomes when the target's graphed forward already drew them (``LMOutput.draws``,
    ``one_hot_draws``: a tree of deterministic drafts, the default residual), used when sampling."""
    check_one_row_per_node(tree, logits)
    if sampling.is_greedy:
        return _verify_greedy(tree, logits, choices)
    if draws is None:
        draws = sampling_draws(tree, logits, sampling, generator, residual)
    return _walk_draws(tree, draws)


def _verify_greedy(tree: TokenTree, logits: torch.Tensor, choices: torch.Tensor | None = None) -> Verdict:
    """The longest path whose tokens are the target's choices (the logits' argmax, or ``choices`` made in the
    target's graph)."""
    return _walk(tree, logits.argmax(dim=-1) if choices is None else choices.to(logits.device))


def sampling_draws(tree: TokenTree, logits: torch.Tensor, sampling: SamplingConfig,
                   generator: torch.Generator | None, residual: ResidualFn = residual_distribution) -> Draws:
    """Every acceptance test and every possible bonus draw of the tree, computed together on the device (the
    host then walks the tree from one read: the step's one host synchronisation).

    Child c (token x, drawn from q) of node v, tried after its earlier siblings were rejected, is accepted when
    u_c * q(x) < p'(x), p' being v's target distribution after those rejections (``residual`` applied once per
    rejected sibling); the walk stops at the first node none of whose children is accepted, and the bonus token
    is node v's draw from p' after all its children. Each test and draw uses its own random numbers, so the
    outcome has the distribution of trying children one by one."""
    if residual is residual_distribution and all(q is None for q in tree.draft_probs[1:]):
        return one_hot_draws(tree.parents_on(logits.device), tree.tokens.to(logits.device), logits, sampling,
                             generator)
    if residual is residual_distribution and sampled_chain(tree):
        return chain_draws(tree.tokens.to(logits.device), logits, stacked_drafts(tree, logits.device), sampling,
                           generator)
    return draw_tests(*residual_tests(tree, logits_to_probs(logits, sampling), residual), generator)


def sampled_chain(tree: TokenTree) -> bool:
    """A chain (known on the host) of two or more nodes whose every draft carries the q it was drawn from."""
    return type(tree) is TokenTree and tree.size > 1 and tree.is_chain and all(
        q is not None for q in tree.draft_probs[1:])


def stacked_drafts(tree: TokenTree, device: torch.device) -> torch.Tensor:
    """(n - 1, V) float32: a sampled chain's q per draft, in order (``chain_draws``'s input)."""
    return torch.stack(tree.draft_probs[1:]).to(device, torch.float32)


def chain_draws(tokens: torch.Tensor, logits: torch.Tensor, drafts: torch.Tensor, sampling: SamplingConfig,
                generator: torch.Generator | None) -> Draws:
    """``sampling_draws`` for a chain whose drafts carry their q (``drafts``, (n - 1, V)), in closed form and device
    work only (what a graphed target forward runs inside its graph): draft i is tested with p_{i-1}(x_i) against
    q_i(x_i), and node i's bonus comes from norm(max(0, p_i - q_{i+1})), the last node's from p itself:
    ``residual_tests``' arithmetic on a chain, row for row."""
    probs = logits_to_probs(logits, sampling)
    drafted = tokens[1:, None]
    target_mass = torch.cat([probs.new_zeros(1), probs[:-1].gather(1, drafted)[:, 0]])
    draft_mass = torch.cat([probs.new_ones(1), drafts.gather(1, drafted)[:, 0]])
    bonus_probs = torch.cat([residual_distribution(probs[:-1], drafts), probs[-1:]])
    return draw_tests(target_mass, draft_mass, bonus_probs, generator)


def one_hot_draws(parents: torch.Tensor, tokens: torch.Tensor, logits: torch.Tensor, sampling: SamplingConfig,
                  generator: torch.Generator | None) -> Draws:
    """``sampling_draws`` for a tree of deterministic drafts (q = one-hot) from its parents (root -1) and tokens
    on the device, device work only: what a graphed target forward runs inside its graph (``LMOutput.draws``)."""
    return draw_tests(*one_hot_tests(parents, tokens, logits_to_probs(logits, sampling)), generator)


def draw_tests(target_mass: torch.Tensor, draft_mass: torch.Tensor, bonus_probs: torch.Tensor,
               generator: torch.Generator | None) -> Draws:
    """Per node: accepted (1) or not by its test u * q(x) < p'(x) (q(x) = 0: never drafted in truth), and the
    bonus token drawn from its distribution; the uniforms first, then the bonus draws, from ``generator``."""
    uniforms = torch.rand(target_mass.shape[0], generator=generator, device=target_mass.device)
    accepted = (uniforms * draft_mass < target_mass) & (draft_mass > 0)
    return accepted.long(), sample_from_probs(bonus_probs, generator)


def _walk_draws(tree: TokenTree, draws: Draws) -> Verdict:
    """The verdict from the sampling tests' outcomes: the first accepted child of each node, down to a node none
    of whose children is accepted, whose bonus token ends the step."""
    accepted, bonus = draws
    return _walk(tree, bonus, accepted)


def _walk(tree: TokenTree, ends: torch.Tensor, passed: torch.Tensor | None = None) -> Verdict:
    """The verdict from the step's one host read: from the root, the first child of each node that passes, down to
    a node none of whose children passes, whose entry of ``ends`` (per node: the target's choice, or the bonus token
    drawn there) ends the step. ``passed`` (per node, 1: its sampling test accepted it); None (greedy): a child
    passes when its token is its parent's entry of ``ends``. The tree's tokens (and a deferred tree's shape) are
    read with them; a root-only tree has no child to compare and reads ``ends`` alone."""
    if tree.size == 1 and type(tree) is TokenTree:
        (end,) = tree.read_with([ends])
        return Verdict((0,), (), end[0], 0)
    tokens, end, *tests = tree.read_with([tree.tokens.to(ends.device), ends, *([passed] if passed is not None else [])])
    passes = (lambda node, child: tests[0][child]) if tests else (lambda node, child: tokens[child] == end[node])
    children = tree.children
    node, path, tried = 0, [0], 0
    while True:
        match = None
        for child in children[node]:
            tried += 1
            if passes(node, child):
                match = child
                break
        if match is None:
            return Verdict(tuple(path), tuple(tokens[i] for i in path[1:]), end[node], tried)
        node = match
        path.append(node)


def residual_tests(tree: TokenTree, probs: torch.Tensor,
                   residual: ResidualFn) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per node c: p'(x_c) and q(x_c) of its acceptance test (see ``sampling_draws``), and per node v the
    distribution its bonus is drawn from; the residual applied sibling rank by sibling rank, all nodes at once."""
    tree.resolve()  # a tree grown on the device (its own read: only custom residuals take this path for those)
    size, vocab = probs.shape
    tokens = tree.tokens.to(probs.device)
    one_hot = torch.nn.functional.one_hot(tokens, vocab).to(probs.dtype)
    drafts = torch.stack([q.to(probs.device, probs.dtype) if q is not None else one_hot[node]
                          for node, q in enumerate(tree.draft_probs)])
    return ranked_tests(sibling_ranks(tree.parents, probs.device), tokens, probs, drafts, residual)


@lru_cache(maxsize=256)
def sibling_ranks(parents: tuple[int, ...], device: torch.device) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """Per sibling rank r: (the nodes with an r-th child, those children) as index tensors on ``device``; made once
    per tree shape (a graphed verify forward reads them as constants)."""
    children = children_of(parents)
    ranks = []
    for rank in range(max(len(kids) for kids in children)):
        holders = [node for node, kids in enumerate(children) if len(kids) > rank]
        ranks.append((index_on(holders, device), index_on([children[node][rank] for node in holders], device)))
    return tuple(ranks)


def ranked_tests(ranks: tuple[tuple[torch.Tensor, torch.Tensor], ...], tokens: torch.Tensor, probs: torch.Tensor,
                 drafts: torch.Tensor, residual: ResidualFn = residual_distribution
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``residual_tests``' arithmetic from the tree's ``sibling_ranks``, its tokens, the target's ``probs`` and each
    node's draft distribution ``drafts`` (n, V) on the device: device work only."""
    size = probs.shape[0]
    remaining = probs.clone()
    target_mass, draft_mass = probs.new_zeros(size), probs.new_ones(size)
    for parent_index, child_index in ranks:
        child_tokens = tokens[child_index]
        target_mass[child_index] = remaining[parent_index, child_tokens]
        draft_mass[child_index] = drafts[child_index, child_tokens]
        remaining[parent_index] = residual(remaining[parent_index], drafts[child_index])
    return target_mass, draft_mass, remaining


def sampled_tree(tree: TokenTree) -> bool:
    """A tree (its shape known on the host) of two or more nodes whose every draft carries the q it was drawn from."""
    return type(tree) is TokenTree and tree.size > 1 and all(q is not None for q in tree.draft_probs[1:])


def tree_draws(ranks: tuple[tuple[torch.Tensor, torch.Tensor], ...], tokens: torch.Tensor, logits: torch.Tensor,
               drafts: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None) -> Draws:
    """``sampling_draws`` for a sampled tree (``sampled_tree``) from its ``sibling_ranks``, tokens and drafts' q's
    (n - 1, V), device work only (what a graphed target forward runs inside its graph): ``residual_tests`` row for
    row (the root's draft row is never read: it is nobody's child)."""
    probs = logits_to_probs(logits, sampling)
    rows = torch.cat([drafts[:1].to(probs.dtype), drafts.to(probs.dtype)])  # row 0 stands in for the root's
    return draw_tests(*ranked_tests(ranks, tokens, probs, rows), generator)


def one_hot_tests(parents: torch.Tensor, tokens: torch.Tensor,
                  probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``residual_tests`` for deterministic drafts (q = one-hot) in closed form, from the parents (root -1) on the
    device, so that a tree whose shape is still there needs no read: rejecting x zeroes p(x) and renormalises, so
    child c is tested with p(x_c) / (1 - mass of its distinct earlier siblings' tokens) (0 for a repeated token),
    i.e. accepted when u * (1 - that mass) < p(x_c); a node's bonus comes from p with all its children's tokens
    removed (p itself if nothing is left)."""
    size, vocab = probs.shape
    order = torch.arange(size, device=probs.device)
    is_child = parents >= 0
    parent = parents.clamp(min=0)
    sibling_before = (parents[:, None] == parents[None, :]) & is_child[:, None] & (order[None, :] < order[:, None])
    repeated = (sibling_before & (tokens[None, :] == tokens[:, None])).any(dim=1)
    edge = torch.where(is_child & ~repeated, probs[parent, tokens], probs.new_zeros(()))
    draft_mass = (1.0 - sibling_before.to(probs.dtype) @ edge).clamp_min(0.0)
    keep = torch.ones(size * vocab, dtype=probs.dtype, device=probs.device)
    keep.scatter_reduce_(0, parent * vocab + tokens, (~is_child).to(probs.dtype), reduce="amin")
    left = probs * keep.view(size, vocab)
    total = left.sum(dim=-1, keepdim=True)
    bonus_probs = torch.where(total > 0, left / total.clamp_min(torch.finfo(left.dtype).tiny), probs)
    return edge, torch.where(is_child, draft_mass, probs.new_ones(())), bonus_probs
