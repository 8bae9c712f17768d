"""Token trees: the one structure every method hands to the verifier.

Node 0 is the root: the last token already chosen but not yet in the target's
KV cache. Every other node is a draft token whose parent is an earlier node
(parents are listed before children). A chain of gamma drafts is a tree of
width one; a root-only tree is one autoregressive step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch

from harness.errors import DraftcountError


@dataclass
class TokenTree:
    """Draft tokens arranged as a tree.

    tokens: (n,) long tensor, node 0 is the root.
    parents: parents[0] == -1; parents[i] < i for i > 0.
    draft_probs: per node, the distribution (target vocabulary, float) the node's
        token was drawn from, or None for a deterministically chosen token
        (verified as q = 1 on that token, as EAGLE does). Ignored for the root
        and for greedy verification.
    """

    tokens: torch.Tensor
    parents: tuple[int, ...]
    draft_probs: list[torch.Tensor | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.tokens.dim() != 1 or self.tokens.shape[0] != len(self.parents):
            raise ValueError("tree tokens must be a 1-D tensor with one entry per parent")
        if not self.parents or self.parents[0] != -1:
            raise ValueError("node 0 must be the root (parent -1)")
        if any(not 0 <= parent < index for index, parent in enumerate(self.parents) if index > 0):
            raise ValueError("every parent must come before its child")
        if not self.draft_probs:
            self.draft_probs = [None] * len(self.parents)
        if len(self.draft_probs) != len(self.parents):
            raise ValueError("draft_probs needs one entry per node")

    @property
    def size(self) -> int:
        return len(self.parents)

    @property
    def num_drafts(self) -> int:
        return len(self.parents) - 1

    @property
    def depths(self) -> tuple[int, ...]:
        return depths_of(self.parents)

    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        return children_of(self.parents)

    @property
    def is_chain(self) -> bool:
        return all(parent == index - 1 for index, parent in enumerate(self.parents))

    def position_ids(self, prefix_len: int) -> torch.Tensor:
        """(1, n) absolute positions: prefix length plus each node's depth."""
        depths = torch.tensor(self.depths, device=self.tokens.device)
        return (depths + prefix_len).unsqueeze(0)

    def attention_bias(self, prefix_len: int, dtype: torch.dtype) -> torch.Tensor | None:
        """Additive float mask (1, 1, n, prefix_len + n): 0 where a node may attend, dtype-min elsewhere.

        A node sees the whole cached prefix, its ancestors and itself. For a
        chain this is the ordinary causal mask, so None is returned and the
        model builds it itself.
        """
        return tree_attention_bias(self.parents, [], list(range(self.size)), prefix_len, dtype, self.tokens.device)

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root down to ``node`` (both included)."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


def root_only(root: torch.Tensor) -> TokenTree:
    """The tree of an autoregressive step: just the root token."""
    return TokenTree(tokens=root.reshape(1), parents=(-1,))


def check_batch_size_one(tensor: torch.Tensor, what: str) -> None:
    """The engine runs one sequence at a time for now; its interfaces keep the batch dimension."""
    if tensor.shape[0] != 1:
        raise DraftcountError(f"{what}: batch size {tensor.shape[0]} is not supported yet (batch size 1 only)")


def tree_attention_bias(parents: tuple[int, ...], cached_nodes: list[int], query_nodes: list[int], prefix_len: int,
                        dtype: torch.dtype, device: torch.device | str) -> torch.Tensor | None:
    """Additive mask for feeding ``query_nodes`` of a tree to a model whose cache holds a prefix and ``cached_nodes``.

    Shape (1, 1, q, prefix_len + len(cached_nodes) + q): each query sees the
    prefix, those of its ancestors that are cached or fed with it, and itself.
    None when that is the causal mask because the keys form one parent-to-child path (chains), which the
    model builds itself.
    """
    keys = list(cached_nodes) + list(query_nodes)
    if all(parents[child] == parent for parent, child in zip(keys, keys[1:])):
        return None  # the keys are one parent-to-child path: causal (decided on the host, no tensor is read)
    visible = _ancestor_matrix(parents)[query_nodes][:, keys]
    bias = torch.zeros((len(query_nodes), prefix_len + len(keys)), dtype=dtype)
    bias[:, prefix_len:].masked_fill_(~visible, torch.finfo(dtype).min)
    return bias.to(device)[None, None]


def node_visibility_bias(parents: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """(n, n) additive mask among a tree's own nodes: 0 where node j is node i or its ancestor, dtype-min elsewhere."""
    bias = torch.zeros((len(parents), len(parents)), dtype=dtype)
    bias.masked_fill_(~_ancestor_matrix(parents), torch.finfo(dtype).min)
    return bias.to(device)


@lru_cache(maxsize=256)
def depths_of(parents: tuple[int, ...]) -> tuple[int, ...]:
    depths = [0] * len(parents)
    for index in range(1, len(parents)):
        depths[index] = depths[parents[index]] + 1
    return tuple(depths)


@lru_cache(maxsize=256)
def children_of(parents: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    children: list[list[int]] = [[] for _ in parents]
    for index in range(1, len(parents)):
        children[parents[index]].append(index)
    return tuple(tuple(kids) for kids in children)


@lru_cache(maxsize=256)
def _ancestor_matrix(parents: tuple[int, ...]) -> torch.Tensor:
    """visible[i, j] is True when node j is node i or one of its ancestors."""
    size = len(parents)
    visible = torch.eye(size, dtype=torch.bool)
    for index in range(1, size):
        visible[index] |= visible[parents[index]]
    return visible
