"""The cache of a hybrid target (Mamba2 layers beside attention layers) that speculative decoding can roll back.

transformers' cache advances a Mamba2 layer's state with every token fed, so rejected drafts cannot be dropped.
``TreeStateCache`` keeps, per Mamba2 layer, a committed convolution window and SSM state, and the activations of
the nodes fed after them (``PendingNodes``); attention layers keep keys and values as a DynamicCache does. Nodes are
fed as a tree (``harness.hybrid.forward``): each node's parent is a node fed before it (or the committed end).

``keep`` (``harness.backend.kv_cache.keep_tree_path`` calls it) keeps the positions before ``prefix_len`` and a
path of nodes after them, which must form one chain: the rest is dropped. The kept chain stays pending up to its
last ``REWIND`` positions, so a later crop may still go back that far (Polybasic's stages crop twice a step); older
positions are folded into the window and state by replaying their activations (``harness.hybrid.ssm_tree``), and
cannot be dropped any more.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer

from harness.errors import DraftcountError
from harness.hybrid.ssm_tree import PendingNodes, replay_path

REWIND = 32  # accepted positions kept as activations, not yet folded into the states: how far a crop may go back


def mamba_layers(config: PretrainedConfig) -> list[int]:
    """The indices of a hybrid config's Mamba2 layers."""
    return [index for index, kind in enumerate(config.layers_block_type) if kind != "full_attention"]


def chain(count: int) -> list[int]:
    """The parents of ``count`` pending positions in a row."""
    return list(range(-1, count - 1))


class TreeStateCache(DynamicCache):
    """Attention keys/values (``layers``, DynamicLayer) and Mamba2 states with pending tree nodes; see the module."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.layers = [DynamicLayer() for _ in range(config.num_hidden_layers)]  # the Mamba2 ones stay empty
        self.mamba = set(mamba_layers(config))
        self.committed = 0  # positions folded into the states (and kept in the attention layers)
        self.parents: list[int] = []  # each pending node's parent among the pending ones (-1: the committed end)
        self.windows: dict[int, torch.Tensor] = {}  # layer -> committed convolution window (conv_dim, K)
        self.states: dict[int, torch.Tensor] = {}  # layer -> committed SSM state (H, P, N)
        self.pending: dict[int, PendingNodes] = {}  # layer -> pending nodes' activations

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.committed + len(self.parents)

    def keep(self, prefix_len: int, path_nodes: list[int]) -> None:
        """Keep positions < ``prefix_len`` and the nodes ``path_nodes`` (relative to ``prefix_len``, in order), one
        chain from the committed end; drop every other pending node."""
        if prefix_len < self.committed:
            raise DraftcountError(f"a hybrid cache keeps only its last {REWIND} accepted positions rewindable: "
                                  f"cannot go back to {prefix_len} (in its SSM states up to {self.committed})")
        base = prefix_len - self.committed
        kept = [*range(base), *(base + node for node in path_nodes)]
        if kept and kept[-1] >= len(self.parents):
            raise DraftcountError(f"keeping pending node {kept[-1]} of {len(self.parents)}")
        for previous, node in zip([-1, *kept], kept):
            if self.parents[node] != previous:
                raise DraftcountError(f"the kept positions are not one path: node {node}'s parent is "
                                      f"{self.parents[node]}, not {previous}")
        if kept != list(range(len(self.parents))):
            for index, nodes in self.pending.items():
                self.pending[index] = nodes.selected(kept)
            positions = [*range(self.committed), *(self.committed + node for node in kept)]
            for index, layer in enumerate(self.layers):
                if index not in self.mamba and layer.keys is not None and layer.keys.numel():
                    where = torch.tensor(positions, dtype=torch.long, device=layer.keys.device)
                    layer.keys = layer.keys.index_select(-2, where)
                    layer.values = layer.values.index_select(-2, where)
        self.parents = chain(len(kept))
        self.fold(len(kept) - REWIND)

    def fold(self, count: int) -> None:
        """Commit the first ``count`` pending positions (a chain) into every Mamba2 layer's window and state."""
        if count <= 0:
            return
        for index, nodes in self.pending.items():
            self.windows[index], self.states[index] = replay_path(self.windows[index], self.states[index], nodes,
                                                                  list(range(count)))
            self.pending[index] = nodes.after(count)
        self.committed += count
        self.parents = chain(len(self.parents) - count)

    def crop(self, max_length: int) -> None:
        """Keep the first ``max_length`` positions (a chain of them must have been fed)."""
        if max_length < self.get_seq_length():
            self.keep(max_length, [])
