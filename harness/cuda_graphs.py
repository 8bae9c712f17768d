"""The target's verify forward replayed from CUDA graphs, one graph per tree size.

Needs the static KV cache (``harness.static_cache``): a captured forward
writes its keys/values at slot indices held in a device buffer and attends
over the cache's whole capacity through a full-width additive mask, so every
replay has the same shapes and addresses. Per step the host copies the tree's
tokens, positions, slots and mask into the graph's input buffers, replays,
and sets the cache's lengths; the outputs are cloned (the next replay
overwrites them).

The first forward of each tree size runs eagerly twice on a side stream
(warm-up, as CUDA-graph capture requires), is captured, then replayed. With
``capture=False`` the same static-buffer forward runs eagerly instead: that is
how the buffer logic is tested on machines without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from harness.errors import DraftcountError
from harness.forward import ForwardTally, LMOutput, count_forward
from harness.models import LoadedModel
from harness.static_cache import PreallocatedLayer, static_layers
from harness.tree import TokenTree, node_visibility_bias


def write_full_width_bias(buffer: torch.Tensor, tree_bias: torch.Tensor, prefix_len: int) -> None:
    """Fill ``buffer`` (1, 1, q, capacity): the prefix visible, the tree block from ``tree_bias`` (q, q), the rest masked."""
    size = tree_bias.shape[-1]
    buffer.fill_(torch.finfo(buffer.dtype).min)
    buffer[..., :prefix_len] = 0
    buffer[0, 0, :, prefix_len:prefix_len + size] = tree_bias


@dataclass
class _GraphBuffers:
    input_ids: torch.Tensor  # (1, q)
    position_ids: torch.Tensor  # (1, q)
    slots: torch.Tensor  # (q,)
    bias: torch.Tensor  # (1, 1, q, capacity)
    graph: torch.cuda.CUDAGraph | None = None
    logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class GraphedVerifier:
    """Verify forwards of ``target`` on one static cache, replayed from a CUDA graph per (tree size, hidden)."""

    def __init__(self, target: LoadedModel, capture: bool = True) -> None:
        if capture and target.device.type != "cuda":
            raise DraftcountError(f"cuda_graphs=on needs a CUDA device; the target is on {target.device}")
        self.target = target
        self.capture = capture
        self.buffers: dict[tuple[int, bool], _GraphBuffers] = {}
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.cache: Cache | None = None
        self.captures = 0

    def _layers(self, cache: Cache) -> list[PreallocatedLayer]:
        layers = static_layers(cache)
        if layers is None or not layers[0].is_initialized:
            raise DraftcountError("graphed verification needs a static KV cache that the prefill has filled")
        if cache is not self.cache:  # graphs point at one cache's buffers
            self.buffers.clear()
            self.cache = cache
        return layers

    def _new_buffers(self, size: int, capacity: int) -> _GraphBuffers:
        device, dtype = self.target.device, self.target.dtype
        return _GraphBuffers(
            input_ids=torch.zeros((1, size), dtype=torch.long, device=device),
            position_ids=torch.zeros((1, size), dtype=torch.long, device=device),
            slots=torch.zeros(size, dtype=torch.long, device=device),
            bias=torch.zeros((1, 1, size, capacity), dtype=dtype, device=device),
        )

    def _forward(self, buffers: _GraphBuffers, layers: list[PreallocatedLayer], hidden: bool):
        for layer in layers:
            layer.graph_slots = buffers.slots
        try:
            output = self.target.model(
                input_ids=buffers.input_ids, position_ids=buffers.position_ids, past_key_values=self.cache,
                attention_mask=buffers.bias, use_cache=True, output_hidden_states=hidden,
            )
        finally:
            for layer in layers:
                layer.graph_slots = None
        return output.logits, (tuple(output.hidden_states) if hidden else None)

    def _capture(self, buffers: _GraphBuffers, layers: list[PreallocatedLayer], hidden: bool) -> None:
        side = torch.cuda.Stream(device=self.target.device)
        side.wait_stream(torch.cuda.current_stream(self.target.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._forward(buffers, layers, hidden)
        torch.cuda.current_stream(self.target.device).wait_stream(side)
        buffers.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(buffers.graph, pool=self.pool):
            buffers.logits, buffers.hidden_states = self._forward(buffers, layers, hidden)
        self.captures += 1

    def forward(self, tree: TokenTree, cache: Cache, prefix_len: int, tally: ForwardTally, hidden: bool) -> LMOutput:
        """The target's forward over ``tree`` after ``prefix_len`` cached positions, as ``run_model`` would give it."""
        layers = self._layers(cache)
        size, capacity = tree.size, layers[0].capacity
        if prefix_len + size > capacity:
            raise DraftcountError(f"static KV cache holds {capacity} positions; this forward needs {prefix_len + size}")
        key = (size, hidden)
        buffers = self.buffers.get(key)
        if buffers is None:
            buffers = self.buffers[key] = self._new_buffers(size, capacity)
        buffers.input_ids.copy_(tree.tokens.reshape(1, size))
        buffers.position_ids.copy_(tree.position_ids(prefix_len))
        torch.arange(prefix_len, prefix_len + size, out=buffers.slots)
        write_full_width_bias(buffers.bias, node_visibility_bias(tree.parents, buffers.bias.dtype, buffers.bias.device),
                              prefix_len)
        if not self.capture:
            logits, states = self._forward(buffers, layers, hidden)
        else:
            if buffers.graph is None:
                self._capture(buffers, layers, hidden)
            buffers.graph.replay()
            logits = buffers.logits.clone()
            states = tuple(state.clone() for state in buffers.hidden_states) if hidden else None
        for layer in layers:
            layer.set_length(prefix_len + size)
        flops = count_forward(self.target, tally, size, prefix_len, size)
        return LMOutput(logits=logits, hidden_states=states, flops=flops)
