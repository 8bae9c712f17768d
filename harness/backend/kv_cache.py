"""KV-cache operations: create, crop, keep an accepted tree path.

Works on transformers' DynamicCache and on the preallocated cache of
``harness.backend.static_cache``. Both hold keys/values of shape (batch, heads, seq,
head_dim) per layer (``cache.layers[i].keys/values``; for the static cache,
views of its buffers). Only full-attention layers are supported:
sliding-window or linear-attention layers cannot drop speculative entries.

A hybrid target (Mamba2 or linear-attention layers beside attention, as in Bamba, Zamba2, FalconH1, NemotronH,
GraniteMoeHybrid, Jamba) keeps recurrent state in its cache: transformers puts it in the same layer object as the
attention keys in some of them (``LinearAttentionAndFullAttentionLayer``), so a crop would drop the rejected drafts'
keys and leave the state advanced past them. ``rollback_refusal`` names such a layer; the engine refuses to draft
on such a model (``ar`` runs: it never drops an entry), and ``crop_cache`` refuses to drop entries from one. A hybrid
layout ``harness.hybrid`` runs over trees (Bamba's) gets a ``TreeStateCache`` instead, whose ``keep`` commits the
accepted path by replaying it into the SSM states: drafting runs there.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer

from harness.errors import DraftcountError
from harness.backend.cuda_graphs import GraphedForwards
from harness.backend.static_cache import PreallocatedLayer, static_layers
from harness.backend.device import index_on
from harness.hybrid.cache import TreeStateCache
from harness.hybrid.forward import runs_trees


def new_cache(config: PretrainedConfig) -> DynamicCache:
    """An empty cache for a model of ``config``: transformers' DynamicCache, or a ``TreeStateCache`` for a hybrid
    layout whose forward ``harness.hybrid`` runs over trees."""
    return TreeStateCache(config) if runs_trees(config) else DynamicCache(config=config)


@functools.cache
def _cache_keyword(module_type: type) -> str:
    parameters = inspect.signature(module_type.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def cache_argument(module: torch.nn.Module, cache: DynamicCache | None) -> dict[str, DynamicCache | None]:
    """``{keyword: cache}`` for calling ``module``: the keyword is ``cache`` where its forward takes one
    (transformers 5.24 renamed it, and drops ``past_key_values`` in 5.40), else ``past_key_values``."""
    return {_cache_keyword(type(module)): cache}


def cache_length(cache: DynamicCache) -> int:
    return cache.get_seq_length()


ROLLBACK_LAYERS = (DynamicLayer, PreallocatedLayer)  # exactly these types: plain full-attention keys and values


def layer_refusal(layer: object, index: int) -> str | None:
    """Why cache layer ``layer`` cannot drop speculative entries, or None when it is a plain full-attention layer."""
    name = type(layer).__name__
    if hasattr(layer, "recurrent_states") or hasattr(layer, "conv_states"):
        return f"layer {index} ({name}) keeps recurrent state (an SSM or linear-attention layer)"
    if getattr(layer, "is_sliding", False):
        return f"layer {index} ({name}) is a sliding-window layer"
    if type(layer) not in ROLLBACK_LAYERS:
        return f"layer {index} ({name}) is not a plain full-attention layer"
    return None


def rollback_refusal(config: PretrainedConfig) -> str | None:
    """Why the KV cache of a model of ``config`` cannot drop rejected drafts (its first such layer), or None."""
    for index, layer in enumerate(new_cache(config).layers):  # built from the config: no tensor is allocated
        why = layer_refusal(layer, index)
        if why:
            return why
    return None


def eager_refusal(config: PretrainedConfig) -> str | None:
    """Why a model of ``config`` runs only eagerly, on a dynamic cache and one request at a time, or None:
    ``rollback_refusal``'s answer, or a hybrid layout ``harness.hybrid`` runs over trees on its own cache (whose
    Mamba2 state would also read a batch's padding)."""
    return rollback_refusal(config) or ("layers are Mamba2 layers" if runs_trees(config) else None)


def refuse_drafting(who: str, why: str | None) -> None:
    """The one-line refusal of ``who``, a drafting method or adapter, on a target whose cache cannot drop rejected
    drafts for reason ``why`` (``rollback_refusal``'s answer; None: nothing to refuse)."""
    if why:
        raise DraftcountError(f"{who} drafts, but the target cannot drop rejected drafts from its KV cache: its {why}. "
                              f"Only ar runs on this target")


def _full_attention_layers(cache: DynamicCache) -> list:
    if isinstance(cache, TreeStateCache):
        raise DraftcountError("this cache operation moves attention entries alone; a hybrid target's Mamba2 states "
                              "cannot follow it (only crops and kept tree paths are supported there)")
    layers = list(cache.layers)
    for index, layer in enumerate(layers):
        why = layer_refusal(layer, index)
        if why:
            raise DraftcountError(f"cannot drop speculative entries from this KV cache: {why}")
    return layers


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Keep the first ``length`` positions of every layer (a layer no longer than that is left as it is: no
    view is made, so an autoregressive step's crop costs no op; a cache no longer than that is not inspected, so
    `ar` runs on a hybrid target)."""
    if cache.get_seq_length() <= length:
        return
    if isinstance(cache, TreeStateCache):
        cache.crop(length)
        return
    for layer in _full_attention_layers(cache):
        if isinstance(layer, PreallocatedLayer):
            layer.set_length(min(length, layer.length))
        elif getattr(layer, "is_initialized", True) and layer.keys is not None and layer.keys.numel() \
                and layer.keys.shape[-2] > length:
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]


def keep_tree_path(cache: DynamicCache, prefix_len: int, path_nodes: list[int],
                   graphs: GraphedForwards | None = None) -> None:
    """After a tree forward, keep the prefix plus the given tree nodes (in order), drop the rest.

    ``path_nodes`` are node indices relative to the tree (0 = root). A path that
    is a run 0, 1, ..., k-1 (always so for chains) is a plain crop; any other
    path is gathered into place (in the static cache's own buffers). With
    ``graphs`` (the cache's graph runner) a static cache's gather runs as one
    graphed block per path length (``gather_path``): the path's positions
    copied in, every layer's gather replayed, instead of four ops a layer.
    """
    kept = prefix_len + len(path_nodes)
    if isinstance(cache, TreeStateCache):  # the path replayed into the Mamba2 states
        cache.keep(prefix_len, list(path_nodes))
        return
    if list(path_nodes) == list(range(len(path_nodes))):
        crop_cache(cache, kept)
        return
    layers = _full_attention_layers(cache)
    if not layers:
        crop_cache(cache, kept)
        return
    index = index_on([prefix_len + node for node in path_nodes], layers[0].keys.device)
    preallocated = static_layers(cache) if graphs is not None else None
    if preallocated is not None and graphs.graphs_forward(prefix_len, len(path_nodes)):
        span = (prefix_len, prefix_len + max(path_nodes) + 1)  # every slot the gather reads or writes
        graphs.run_block(("keep_path", len(path_nodes)), cache, prefix_len, kept, {"index": index},
                         lambda buffers, start: gather_path(preallocated, buffers["index"], start),
                         forwards=0,  # no model forward: the runner's forward count stays the model's
                         protect=lambda: saved_slots(preallocated, *span))
        return
    for layer in layers:
        layer.keys[..., prefix_len:kept, :] = layer.keys.index_select(-2, index)
        layer.values[..., prefix_len:kept, :] = layer.values.index_select(-2, index)
    crop_cache(cache, kept)


def gather_path(layers: list[PreallocatedLayer], index: torch.Tensor, start: torch.Tensor) -> tuple[()]:
    """Inside a graph: every static layer's entries at positions ``index`` (the kept path's) moved to the slots
    ``start``, ``start`` + 1, ... (device work only)."""
    slots = start + torch.arange(index.shape[0], device=index.device)
    for layer in layers:
        layer.key_buffer.index_copy_(2, slots, layer.key_buffer.index_select(2, index))
        layer.value_buffer.index_copy_(2, slots, layer.value_buffer.index_select(2, index))
    return ()


def saved_slots(layers: list[PreallocatedLayer], start: int, end: int) -> Callable[[], None]:
    """A copy of every layer's slots ``start``..``end`` - 1 and what writes it back: what a graph capture's warm-ups
    of an in-place gather (``gather_path``, which reads slots it then overwrites) must leave as they found it."""
    saved = [(layer.key_buffer[:, :, start:end].clone(), layer.value_buffer[:, :, start:end].clone())
             for layer in layers]

    def restore() -> None:
        for layer, (keys, values) in zip(layers, saved):
            layer.key_buffer[:, :, start:end].copy_(keys)
            layer.value_buffer[:, :, start:end].copy_(values)

    return restore


def append_entries(cache: DynamicCache, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
    """Append saved keys/values (one (B, heads, n, dim) tensor per layer) after every layer's entries; in
    place in a static cache when they were saved from where they now belong."""
    for layer, layer_keys, layer_values in zip(_full_attention_layers(cache), keys, values):
        if isinstance(layer, PreallocatedLayer):
            layer.append(layer_keys, layer_values)
        else:
            layer.keys = torch.cat([layer.keys, layer_keys], dim=-2)
            layer.values = torch.cat([layer.values, layer_values], dim=-2)
