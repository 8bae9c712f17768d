"""A Mamba2 layer over a token tree in one pass, and the commit of a path by activation replay (STree).

A Mamba2 mixer is, per head h, the recurrence ``s_t = exp(dt_t A_h) s_{t-1} + dt_t x_t B_t^T`` read out as
``y_t = s_t C_t + D_h x_t``, after a causal depthwise convolution of width K over (x, B, C). Unrolled from the
committed state ``s_0``, position i's output is a sum over the positions it follows,

    y_i = exp(cum_i) s_0 C_i + sum_{j <= i} exp(cum_i - cum_j) dt_j (C_i . B_j) x_j + D x_i,
    cum_i = sum_{j <= i} dt_j A,

and on a tree "the positions it follows" are the node's ancestors and itself: ``cum[node] = cum[parent] + dt A``,
and the convolution's window is the node's last K - 1 ancestors (then the committed window) and the node. So a
whole tree is one masked sum, as attention is (STree, arXiv 2505.14969). Nothing per node is snapshotted: the
layer keeps each pending node's raw convolution input, x, B, dt and cum (``PendingNodes``), and committing an
accepted path recomputes the convolution window and the state from those along the path ("activation replay").

Shapes (one sequence, batch 1): n nodes, H heads of P channels, G groups of N state channels, conv_dim channels.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
from torch.nn import functional

from harness.errors import DraftcountError


@dataclass
class PendingNodes:
    """A Mamba2 layer's activations of the nodes fed since its last commit, in feeding order (parents first)."""

    raw: torch.Tensor  # (n, conv_dim): convolution input (before the convolution)
    x: torch.Tensor  # (n, H, P)
    b: torch.Tensor  # (n, G, N)
    dt: torch.Tensor  # (n, H): after softplus and the limit
    cum: torch.Tensor  # (n, H): sum of dt A over the node's ancestors and itself, from the committed state

    @staticmethod
    def empty(conv_dim: int, heads: int, head_dim: int, groups: int, state: int, dtype: torch.dtype,
              device: torch.device) -> PendingNodes:
        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros((0, *shape), dtype=dtype, device=device)
        return PendingNodes(zeros(conv_dim), zeros(heads, head_dim), zeros(groups, state), zeros(heads),
                            zeros(heads))

    def selected(self, nodes: list[int]) -> PendingNodes:
        """The rows of ``nodes``, a chain from the committed end (so their cum values stay what they are)."""
        index = torch.tensor(nodes, dtype=torch.long, device=self.raw.device)
        return PendingNodes(*(tensor.index_select(0, index) for tensor in (self.raw, self.x, self.b, self.dt,
                                                                             self.cum)))

    def after(self, count: int) -> PendingNodes:
        """A chain's nodes after its first ``count``, once those are committed: cum rebased on the new state."""
        base = self.cum[count - 1] if count else torch.zeros_like(self.cum[0:1])[0]
        return PendingNodes(self.raw[count:], self.x[count:], self.b[count:], self.dt[count:], self.cum[count:] - base)

    def extended(self, other: PendingNodes) -> PendingNodes:
        return PendingNodes(*(torch.cat([mine, theirs]) for mine, theirs in
                              zip((self.raw, self.x, self.b, self.dt, self.cum),
                                  (other.raw, other.x, other.b, other.dt, other.cum))))

    def __len__(self) -> int:
        return self.raw.shape[0]


@lru_cache(maxsize=1024)  # a decode's trees repeat their shapes: built once each (never written to)
def ancestor_matrix(parents: tuple[int, ...]) -> torch.Tensor:
    """(n, n) bool: [i, j] when node j is node i or one of its ancestors (``parents[i] < i``, -1: a root)."""
    count = len(parents)
    rows = [[False] * count for _ in range(count)]
    for node, parent in enumerate(parents):
        if parent >= node:
            raise DraftcountError(f"node {node}'s parent {parent} does not come before it")
        if parent >= 0:
            rows[node][:node] = rows[parent][:node]
        rows[node][node] = True
    return torch.tensor(rows, dtype=torch.bool).reshape(count, count)  # host: cached per shape; callers move it


@lru_cache(maxsize=1024)
def window_indices(parents: tuple[int, ...], kernel: int) -> torch.Tensor:
    """(n, kernel) indices into [the committed window's ``kernel`` columns, the n nodes]: each node's
    convolution window, oldest first (its last kernel - 1 ancestors, then the committed columns before them)."""
    rows = []
    for node in range(len(parents)):
        window, at = [], kernel + node
        for _ in range(kernel):
            window.append(at)
            if at >= kernel:  # a node: step to its parent (or, from a root, the last committed column)
                parent = parents[at - kernel]
                at = kernel + parent if parent >= 0 else kernel - 1
            else:
                at -= 1
        rows.append(window[::-1])
    return torch.tensor(rows, dtype=torch.long).reshape(len(parents), kernel)  # host: cached; callers move it


def tree_convolution(conv_window: torch.Tensor, raw: torch.Tensor, parents: tuple[int, ...], weight: torch.Tensor,
                     bias: torch.Tensor | None, queries: int) -> torch.Tensor:
    """The depthwise causal convolution along tree paths at the last ``queries`` nodes: ``conv_window``
    (conv_dim, K) the committed inputs (the last one newest), ``raw`` (n, conv_dim) every pending node's input,
    ``weight`` (conv_dim, K). (queries, conv_dim), before the activation."""
    kernel = weight.shape[-1]
    columns = torch.cat([conv_window.transpose(0, 1).to(raw.dtype), raw])  # (K + n, conv_dim)
    windows = columns[window_indices(parents, kernel)[-queries:].to(raw.device)]  # (queries, K, conv_dim)
    out = torch.einsum("nkc,ck->nc", windows, weight.to(raw.dtype))
    return out if bias is None else out + bias.to(raw.dtype)


def path_cumulative(parents: tuple[int, ...], dt_a: torch.Tensor, queries: int) -> torch.Tensor:
    """cum[node] = cum[parent] + dt_a[node] (0 above a root) of the last ``queries`` nodes: ``dt_a`` (n, H) ->
    (queries, H), summed over each node's ancestors and itself."""
    return ancestor_matrix(parents)[-queries:].to(dt_a) @ dt_a


def tree_scan(state: torch.Tensor, nodes: PendingNodes, c: torch.Tensor, d: torch.Tensor, parents: tuple[int, ...],
              queries: int) -> torch.Tensor:
    """The SSM output of the last ``queries`` of the pending ``nodes`` (their ``c`` (queries, G, N)) from the
    committed ``state`` (H, P, N): the ancestor sum of the module docstring. (queries, H, P)."""
    heads, groups = nodes.x.shape[1], nodes.b.shape[1]
    per_group = heads // groups
    ancestors = ancestor_matrix(parents)[-queries:].to(nodes.x.device)  # (q, n)
    cum_q = nodes.cum[-queries:]  # (q, H)
    gap = cum_q[:, None, :] - nodes.cum[None, :, :]  # (q, n, H)
    decay = torch.where(ancestors[..., None], gap, torch.full_like(gap, float("-inf"))).exp()
    scores = torch.einsum("qgs,ngs->qng", c, nodes.b).repeat_interleave(per_group, dim=-1)  # (q, n, H)
    weights = decay * scores * nodes.dt[None]  # (q, n, H)
    y = torch.einsum("qnh,nhp->qhp", weights, nodes.x)
    c_heads = c.repeat_interleave(per_group, dim=1)  # (q, H, N)
    y = y + cum_q.exp()[..., None] * torch.einsum("hps,qhs->qhp", state.to(y.dtype), c_heads)
    return y + d.to(y.dtype)[None, :, None] * nodes.x[-queries:]


def replay_path(conv_window: torch.Tensor, state: torch.Tensor, nodes: PendingNodes,
                path: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The committed convolution window (conv_dim, K) and state (H, P, N) after the pending ``path`` (indices
    into ``nodes``, a chain from the committed state, root first), recomputed from the kept activations."""
    if not path:
        return conv_window, state
    kernel = conv_window.shape[-1]
    index = torch.tensor(path, dtype=torch.long, device=nodes.raw.device)
    window = torch.cat([conv_window, nodes.raw[index].transpose(0, 1).to(conv_window.dtype)], dim=1)[:, -kernel:]
    groups = nodes.b.shape[1]
    per_group = nodes.x.shape[1] // groups
    cum, dt = nodes.cum[index], nodes.dt[index]  # (k, H)
    decay = (cum[-1][None] - cum).exp() * dt  # (k, H)
    b_heads = nodes.b[index].repeat_interleave(per_group, dim=1)  # (k, H, N)
    added = torch.einsum("kh,khp,khs->hps", decay, nodes.x[index], b_heads)
    new_state = cum[-1].exp()[:, None, None] * state.to(added.dtype) + added
    return window, new_state.to(state.dtype)


def softplus_dt(dt: torch.Tensor, dt_bias: torch.Tensor, limit: tuple[float, float]) -> torch.Tensor:
    """Mamba2's step size: softplus(dt + bias), clamped to the layer's limit."""
    step = functional.softplus(dt + dt_bias.to(dt.dtype))
    low, high = limit
    return step.clamp(min=low, max=high) if (low, high) != (0.0, float("inf")) else step
