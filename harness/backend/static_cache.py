"""A preallocated (static) KV cache for the target, usable by transformers models.

Every layer owns one key and one value buffer of ``capacity`` positions,
allocated at the first forward and kept across generations (``reset`` only
rewinds the lengths). A forward writes its keys/values into the buffer in
place; ``keys``/``values`` are views of the filled part, so code written for
transformers' DynamicCache (``harness.backend.kv_cache``) reads and gathers them the
same way, and keeping an accepted tree path is an in-place gather plus a new
length: nothing is reallocated during a generation.

For CUDA-graph capture (``harness.backend.cuda_graphs``) a layer can instead write at
device-side slot indices (``graph_slots``) and return the whole buffer, so the
captured kernels see fixed shapes and addresses; the attention mask then
covers all ``capacity`` positions.
"""

from __future__ import annotations

import torch
from transformers import PretrainedConfig
from transformers.cache_utils import Cache, CacheLayerMixin

from harness.errors import DraftcountError
from harness.backend.models import text_config



def refuse_replacing(buffer: torch.Tensor | None, value: torch.Tensor | None, name: str) -> None:
    """A static cache's ``keys``/``values`` are views of its buffer: assigning the buffer's own storage (or None) is
    accepted, any other tensor is an error."""
    if value is not None and buffer is not None and value.data_ptr() != buffer.data_ptr():
        raise DraftcountError(f"a static KV cache's {name} are its buffer's; write into them, do not replace them")

class PreallocatedLayer(CacheLayerMixin):
    """One full-attention layer's preallocated keys and values."""

    is_compileable = True
    is_sliding = False

    def __init__(self, capacity: int) -> None:
        self.key_buffer: torch.Tensor | None = None
        self.value_buffer: torch.Tensor | None = None
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self.graph_slots: torch.Tensor | None = None  # set only while a CUDA graph is captured

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, key_dim = key_states.shape
        self.allocate(batch, heads, key_dim, value_states.shape[-1], key_states.dtype, key_states.device)

    def allocate(self, batch: int, heads: int, key_dim: int, value_dim: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        """Allocate the buffers now (before a CUDA graph is captured, say) instead of at the first forward."""
        self.key_buffer = torch.zeros(batch, heads, self.capacity, key_dim, dtype=dtype, device=device)
        self.value_buffer = torch.zeros(batch, heads, self.capacity, value_dim, dtype=dtype, device=device)
        self.dtype, self.device = dtype, device
        self.is_initialized = True

    # ``keys``/``values``: views of the filled part, made when read (a graphed forward sets the length of every layer
    # each call, and two views per layer per call were a tenth of a step's host time on a GPU). Assigning them
    # (transformers' ``__init__`` does) is accepted and ignored: the buffers are the truth.
    @property
    def keys(self) -> torch.Tensor | None:
        return None if self.key_buffer is None else self.key_buffer[:, :, : self.length]

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        refuse_replacing(self.key_buffer, value, "keys")

    @property
    def values(self) -> torch.Tensor | None:
        return None if self.value_buffer is None else self.value_buffer[:, :, : self.length]

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        refuse_replacing(self.value_buffer, value, "values")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.graph_slots is not None:
            self.key_buffer.index_copy_(2, self.graph_slots, key_states)
            self.value_buffer.index_copy_(2, self.graph_slots, value_states)
            return self.key_buffer, self.value_buffer
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise DraftcountError(f"static KV cache holds {self.capacity} positions; this forward needs {end}")
        self.key_buffer[:, :, self.length:end].copy_(key_states)
        self.value_buffer[:, :, self.length:end].copy_(value_states)
        self.length = end
        return self.keys, self.values

    def set_length(self, length: int) -> None:
        """Keep the first ``length`` positions (the rest stays in the buffer, unseen, until overwritten)."""
        if not 0 <= length <= self.capacity:
            raise DraftcountError(f"static KV cache length {length} is outside 0..{self.capacity}")
        self.length = length

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Put saved entries back after the current length. Entries that are still where they were saved
        (a view of this buffer right at the current length) are kept in place: nothing is copied."""
        start, end = self.length, self.length + keys.shape[-2]
        if end > self.capacity:
            raise DraftcountError(f"static KV cache holds {self.capacity} positions; appending needs {end}")
        in_place = keys.data_ptr() == self.key_buffer[:, :, start:].data_ptr() and \
            values.data_ptr() == self.value_buffer[:, :, start:].data_ptr()
        if not in_place:
            self.key_buffer[:, :, start:end].copy_(keys.clone())
            self.value_buffer[:, :, start:end].copy_(values.clone())
        self.set_length(end)

    def crop(self, tokens_to_remove: int) -> None:
        self.set_length(self.length + tokens_to_remove if tokens_to_remove < 0 else tokens_to_remove)

    def reset(self) -> None:
        self.set_length(0)

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_max_length(self) -> int:
        return self.capacity


def _num_layers(config: PretrainedConfig) -> int:
    text = text_config(config)
    layer_types = getattr(text, "layer_types", None)
    if layer_types and any(kind != "full_attention" for kind in layer_types):
        raise DraftcountError(
            f"a static KV cache needs full-attention layers only; this model has {sorted(set(layer_types))}"
        )
    return int(text.num_hidden_layers)


def new_static_cache(config: PretrainedConfig, capacity: int, dtype: torch.dtype | None = None,
                     device: torch.device | None = None) -> Cache:
    """A cache of ``capacity`` positions per layer; its buffers are allocated now when ``dtype`` and ``device``
    are given (from the config's key/value heads and head size), else at the first forward."""
    if capacity < 1:
        raise DraftcountError(f"static KV cache capacity must be >= 1, got {capacity}")
    cache = Cache(layers=[PreallocatedLayer(capacity) for _ in range(_num_layers(config))])
    if dtype is not None and device is not None:
        text = text_config(config)
        heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        for layer in cache.layers:
            layer.allocate(1, heads, head_dim, head_dim, dtype, device)
    return cache


def static_layers(cache: Cache) -> list[PreallocatedLayer] | None:
    """The cache's layers if it is a static cache, else None."""
    layers = list(getattr(cache, "layers", []))
    if layers and all(isinstance(layer, PreallocatedLayer) for layer in layers):
        return layers
    return None


def static_capacity(cache: Cache) -> int | None:
    layers = static_layers(cache)
    return layers[0].capacity if layers else None


def reset_static_cache(cache: Cache) -> None:
    for layer in static_layers(cache) or []:
        layer.reset()
