"""Traversal Verification (Weng et al., NeurIPS 2025, arXiv 2505.12398): leaf-to-root, sequence-level acceptance.

Where the token-level verifier walks down from the root and accepts child by child, traversal verification tests
whole root-to-leaf paths, leaves first, and on a rejection hands the rejected path's probability mass back to its
parent (the rule of Block Verification on a chain). Its form here is the reconstruction the project's seed notes
give and check exact by enumeration (the paper's code is not public):

- every non-root node c (token x_c, drawn from q_c; one-hot for a deterministic draft) gets
  alpha(c) = min(alpha(parent) p_parent(x_c) / q_c(x_c), 1), alpha(root) = 1;
- repeatedly take v, the first leaf of the live tree in post-order (from the root, always the first live child in
  sibling order); with u ~ U(0, 1), u < alpha(v) accepts the whole path root -> v, and the bonus token is drawn
  from p_v as it stands (possibly a residual); otherwise v is deleted and its parent updated:
  S = sum_x [alpha(par) p_par(x) - q_v(x)]_+, p_par <- [alpha(par) p_par - q_v]_+ / S,
  alpha(par) <- S / (S + 1 - alpha(par)), and alpha recomputed for par's live descendants.

The root always has alpha 1, so when every path is rejected the bonus comes from the root's residual. A child
whose q gives its token no mass (a sibling drawn after q ran out of tokens) was never drafted in truth: it is
dropped with its subtree before the walk. Greedy decoding has no randomness to move, so it is the token-level
verifier's greedy walk (the longest path of target-argmax tokens). Unlike the token-level verifier, this one reads
each test's alpha on the host: one read per leaf test rather than one per step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.trees.tree import TokenTree
from harness.verify.sampling import SamplingConfig, logits_to_probs, sample_from_probs
from harness.verify.token_level import verify_tree
from harness.verify.verdict import Verdict, check_one_row_per_node

ParentUpdate = Callable[[torch.Tensor, float, torch.Tensor], tuple[torch.Tensor, float]]


def block_update(p_parent: torch.Tensor, alpha_parent: float, q_child: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The parent's distribution and alpha after one child's path was rejected (see the module docstring)."""
    left = (alpha_parent * p_parent - q_child).clamp_min(0.0)
    total = float(left.sum())
    if total <= 0.0:  # nothing left to give: the parent's own path can no longer be accepted
        return p_parent, 0.0
    return left / total, total / (total + 1.0 - alpha_parent)


def verify_traversal(
    tree: TokenTree,
    logits: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    update: ParentUpdate = block_update,
    choices: torch.Tensor | None = None,
) -> Verdict:
    """Verify ``tree`` against the target's ``logits`` (n, V), one row per tree node, by traversal verification
    (``choices``: as ``verify_tree``'s)."""
    if sampling.is_greedy:
        return verify_tree(tree, logits, sampling, generator, choices=choices)
    check_one_row_per_node(tree, logits)
    tree.resolve()
    probs = logits_to_probs(logits, sampling)
    tokens = tree.tokens.to(probs.device).tolist()
    vocab = probs.shape[-1]
    drafts = [None] + [
        q.to(probs.device, probs.dtype) if q is not None
        else torch.nn.functional.one_hot(torch.tensor(tokens[node], device=probs.device), vocab).to(probs.dtype)
        for node, q in enumerate(tree.draft_probs[1:], start=1)]
    parents, children = tree.parents, [list(kids) for kids in tree.children]
    live = [True] * tree.size
    for node in range(1, tree.size):  # a q without mass on its own token: never drafted in truth
        if not live[parents[node]] or float(drafts[node][tokens[node]]) <= 0.0:
            live[node] = False
    current = [probs[node] for node in range(tree.size)]
    alpha = [1.0] * tree.size

    def refresh(top: int) -> None:
        """alpha of ``top``'s live descendants from its own (node indices grow down the tree)."""
        for node in range(top + 1, tree.size):
            if live[node] and _descends(parents, node, top):
                parent = parents[node]
                ratio = float(current[parent][tokens[node]]) / float(drafts[node][tokens[node]])
                alpha[node] = min(alpha[parent] * ratio, 1.0)

    refresh(0)
    tried = 0
    while True:
        path = [0]
        while live_children := [child for child in children[path[-1]] if live[child]]:
            path.append(live_children[0])
        leaf = path[-1]
        if leaf == 0:
            break
        tried += 1
        uniform = float(torch.rand((), generator=generator, device=probs.device))
        if uniform < alpha[leaf]:
            break
        live[leaf] = False
        parent = parents[leaf]
        current[parent], alpha[parent] = update(current[parent], alpha[parent], drafts[leaf])
        refresh(parent)
    bonus = int(sample_from_probs(current[path[-1]], generator).item())
    return Verdict(tuple(path), tuple(tokens[node] for node in path[1:]), bonus, tried)


def _descends(parents: tuple[int, ...], node: int, ancestor: int) -> bool:
    while node > ancestor:
        node = parents[node]
    return node == ancestor
