"""Token trees: the one structure every method hands to the verifier.

Node 0 is the root: the last token already chosen but not yet in the target's
KV cache. Every other node is a draft token whose parent is an earlier node
(parents are listed before children). A chain of gamma drafts is a tree of
width one; a root-only tree is one autoregressive step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from harness.errors import DraftcountError
from harness.backend.device import index_on, to_device


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
        return self.tokens.shape[0]

    @property
    def num_drafts(self) -> int:
        return self.tokens.shape[0] - 1

    def resolve(self) -> None:
        """Make the shape available on the host (it already is; see ``DeferredTree``)."""

    def parents_on(self, device: torch.device | str) -> torch.Tensor:
        """(n,) parents (root -1) as a long tensor on ``device``."""
        return to_device(torch.tensor(self.parents, dtype=torch.long), device)

    def read_with(self, rows: list[torch.Tensor]) -> list[list[int]]:
        """``rows`` (1-D integer tensors on the tree's device) as host lists, read in one go: the one host
        synchronisation of a greedy verification. A tree whose shape is still on the device reads it too."""
        lengths = [row.shape[0] for row in rows]
        flat = (rows[0].long().tolist() if len(rows) == 1 else torch.cat([row.long() for row in rows]).tolist()
                ) if rows else []
        out, start = [], 0
        for length in lengths:
            out.append(flat[start:start + length])
            start += length
        return out

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
        return to_device(torch.tensor(self.depths) + prefix_len, self.tokens.device).unsqueeze(0)

    def graph_bias(self, dtype: torch.dtype) -> torch.Tensor | None:
        """The mask a graphed verify forward takes (``attention_bias``'s; a deferred tree's is built in the graph)."""
        return self.attention_bias(dtype)

    def position_offsets(self) -> tuple[int, ...] | torch.Tensor:
        """Each node's position relative to the root's (its depth): on the host while the shape is."""
        return self.depths

    def attention_bias(self, dtype: torch.dtype) -> torch.Tensor | None:
        """Additive float mask (1, 1, n, n) among the tree's nodes: 0 where a node may attend (its ancestors and
        itself), dtype-min elsewhere; the cached prefix before them is visible to all (``run_model``'s
        convention). For a chain this is the causal mask, so None is returned and the model builds it."""
        return tree_attention_bias(self.parents, [], list(range(self.size)), dtype, self.tokens.device)

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


def tree_attention_bias(parents: tuple[int, ...], cached_nodes: list[int], query_nodes: list[int],
                        dtype: torch.dtype, device: torch.device | str) -> torch.Tensor | None:
    """Additive mask for feeding ``query_nodes`` of a tree to a model whose cache holds a prefix and then
    ``cached_nodes``.

    Shape (1, 1, q, len(cached_nodes) + q), over the tree's keys only: each query sees those of its ancestors
    that are cached or fed with it, and itself; the prefix before them is visible to every query
    (``run_model`` pads the mask with it). None when that is the causal mask because the keys form one
    parent-to-child path (chains), which the model builds itself.
    """
    keys = list(cached_nodes) + list(query_nodes)
    if all(parents[child] == parent for parent, child in zip(keys, keys[1:])):
        return None  # the keys are one parent-to-child path: causal (decided on the host, no tensor is read)
    visible = _ancestor_matrix(parents)[query_nodes][:, keys]
    # host: beside the host-built ancestor matrix, then sent with to_device
    bias = torch.zeros((len(query_nodes), len(keys)), dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)
    return to_device(bias, device)[None, None]


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


def ancestor_matrix(parents: tuple[int, ...]) -> torch.Tensor:
    """visible[i, j] is True when node j is node i or one of its ancestors (a tree's attention pattern)."""
    return _ancestor_matrix(parents)


@lru_cache(maxsize=256)
def _ancestor_matrix(parents: tuple[int, ...]) -> torch.Tensor:
    """visible[i, j] is True when node j is node i or one of its ancestors."""
    size = len(parents)
    visible = torch.eye(size, dtype=torch.bool)  # host: cached per tree shape; callers move it
    for index in range(1, size):
        visible[index] |= visible[parents[index]]
    return visible


class DeferredTree(TokenTree):
    """A token tree whose shape still lives on the device, as a drafter that grows trees there leaves it.

    Tokens, parents (root -1) and depths are device tensors; the target's verify forward takes positions and
    the tree mask from them, on the device. The host learns the parents in the verifier's read
    (``read_with``), together with the tree's tokens, the target's choices and whatever ``pending`` the
    drafter wants back (``on_read`` gets those values), so growing and verifying a tree costs one host
    synchronisation. ``parents`` and what derives from it are available after that read (or ``resolve``).
    """

    def __init__(self, tokens: torch.Tensor, device_parents: torch.Tensor, device_depths: torch.Tensor,
                 max_depth: int, pending: torch.Tensor | None = None,
                 on_read: Callable[[list[int]], None] | None = None) -> None:
        if tokens.dim() != 1 or tokens.shape != device_parents.shape or tokens.shape != device_depths.shape:
            raise ValueError("a deferred tree needs 1-D tokens, parents and depths of one length")
        self.tokens = tokens
        self.device_parents, self.device_depths, self.max_depth = device_parents, device_depths, max_depth
        self.pending = pending if pending is not None else device_parents.new_zeros(0)
        self.on_read = on_read
        self.draft_probs = [None] * tokens.shape[0]
        self._parents: tuple[int, ...] | None = None

    @property
    def parents(self) -> tuple[int, ...]:
        if self._parents is None:
            raise DraftcountError("this tree's shape is still on the device: verify it (or call resolve()) first")
        return self._parents

    def read_with(self, rows: list[torch.Tensor]) -> list[list[int]]:
        if self._parents is not None:
            return super().read_with(rows)
        *values, parents, pending = super().read_with([*rows, self.device_parents, self.pending])
        self._set_parents(tuple(parents), pending)
        return values

    def resolve(self) -> None:
        """Read the shape now (a host synchronisation of its own)."""
        if self._parents is None:
            self.read_with([])

    def _set_parents(self, parents: tuple[int, ...], pending: list[int]) -> None:
        TokenTree(self.tokens, parents)  # the same checks as any tree
        self._parents = parents
        if self.on_read is not None:
            self.on_read(pending)

    def parents_on(self, device: torch.device | str) -> torch.Tensor:
        return self.device_parents.to(device)

    def position_ids(self, prefix_len: int) -> torch.Tensor:
        return (self.device_depths + prefix_len).unsqueeze(0)

    def position_offsets(self) -> torch.Tensor:
        return self.device_depths

    def attention_bias(self, dtype: torch.dtype) -> torch.Tensor:
        """(1, 1, n, n) over the tree's nodes, built on the device: each node sees its ancestors and itself."""
        return self.graph_bias(dtype).build(self.device_parents)[None, None]

    def graph_bias(self, dtype: torch.dtype) -> AncestorBias:
        """The mask as a graphed forward builds it inside its graph from the parents (``AncestorBias``)."""
        return AncestorBias(self.device_parents, self.max_depth, dtype)


@dataclass(frozen=True)
class AncestorBias:
    """A tree mask built on the device from the parents (root -1) of a tree at most ``max_depth`` deep: what a
    graphed forward copies per call (``source``) and builds inside its graph (``build``), the key of its shape."""

    source: torch.Tensor
    max_depth: int
    dtype: torch.dtype

    @property
    def width(self) -> int:
        return self.source.shape[0]

    @property
    def key(self) -> tuple:
        return ("ancestors", self.max_depth, self.dtype)

    def build(self, parents: torch.Tensor) -> torch.Tensor:
        """(n, n): 0 where a node sees a node (its ancestors and itself), the dtype's lowest value elsewhere."""
        size = parents.shape[0]
        visible = torch.eye(size, dtype=torch.bool, device=parents.device)
        step_up = parents.clamp(min=0)  # the root is its own parent
        for _ in range(self.max_depth):
            visible = visible | visible.index_select(0, step_up)
        return torch.zeros((size, size), dtype=self.dtype, device=parents.device).masked_fill_(
            ~visible, torch.finfo(self.dtype).min)


def chain_tree(root: int, drafts: list[int], device: torch.device) -> TokenTree:
    """A deterministic chain: the root, then ``drafts`` one below the other."""
    return TokenTree(index_on([root, *drafts], device), tuple(range(-1, len(drafts))))
