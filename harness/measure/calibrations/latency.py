"""Latency of one forward per tree size: the one measurement behind Sequoia's latency-chosen budget (rule
measure_latency) and the 8B-shape projection (``python -m harness measure project-8b``); per batch size, the
latency per tokens in the batch behind the load study's tree size per B (rule measure_batch_latency).

A timed forward runs as ``timing`` says: ``eager`` (forwards launched from Python on transformers' DynamicCache),
``static`` (the same on a preallocated KV cache) or ``cuda_graphs`` (replayed from a CUDA graph on that static
cache): ``harness.backend.timed``. Every time is a median over repeats, the sizes timed in turns
(``harness.backend.timed.timed_seconds_in_turns``).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from harness.backend.forward import hybrid_forward, prefix_visible
from harness.backend.kv_cache import cache_argument, crop_cache
from harness.backend.timed import timed_seconds_in_turns, timing_cache
from harness.hybrid.cache import TreeStateCache
from harness.trees.tree import depths_of, tree_attention_bias


def wide_tree(nodes: int, fan_out: int = 4) -> tuple[int, ...]:
    """Parents of a ``nodes``-node tree filled breadth first with ``fan_out`` children per node."""
    return (-1,) + tuple((index - 1) // fan_out for index in range(1, nodes))


@torch.no_grad()
def target_latencies(model: PreTrainedModel, prefix: int, sizes: list[int], repeats: int,
                     timing: str = "eager", rows: int = 1) -> dict[int, float]:
    """Seconds of one forward of ``rows`` rows of ``size`` tree tokens each (a wide tree, tree mask) after a
    ``prefix``-token cache per row (run as ``timing`` says: see ``timing_cache``; several rows only eagerly, as the
    batched engine verifies), the sizes timed in turns (``timed_seconds_in_turns``)."""
    if rows > 1 and timing != "eager":
        raise ValueError(f"a forward of {rows} rows is timed eagerly only, not {timing!r}")
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    cache = timing_cache(model.config, prefix + max(sizes), model.dtype, device, timing)
    cached = cache_argument(model, cache)

    def run(input_ids: torch.Tensor, bias: torch.Tensor | None, position_ids: torch.Tensor | None) -> None:
        if isinstance(cache, TreeStateCache):  # a hybrid target: its tree forward (as the engine verifies)
            if position_ids is None:
                position_ids = torch.arange(input_ids.shape[1], device=device)[None]
            hybrid_forward(model, input_ids, cache, position_ids, bias)
        else:
            model(input_ids=input_ids, attention_mask=bias, position_ids=position_ids, use_cache=True, **cached)

    run(torch.randint(vocab, (rows, prefix), device=device), None, None)
    if isinstance(cache, TreeStateCache):
        cache.keep(prefix, [])  # the prefix committed: each timed tree is then cropped back to it
    forwards = {}
    for size in sizes:
        parents = wide_tree(size)
        bias = prefix_visible(tree_attention_bias(parents, [], list(range(size)), model.dtype, device), prefix + size)
        bias = None if bias is None else bias.expand(rows, -1, -1, -1)
        position_ids = (prefix + torch.tensor(depths_of(parents), device=device))[None].expand(rows, -1)
        input_ids = torch.randint(vocab, (rows, size), device=device)

        def forward(input_ids=input_ids, bias=bias, position_ids=position_ids) -> None:
            run(input_ids, bias, position_ids)
            crop_cache(cache, prefix)

        forwards[size] = forward
    return timed_seconds_in_turns(forwards, device, repeats, timing)


def batch_latencies(model: PreTrainedModel, prefix: int, sizes: list[int], batch_sizes: list[int],
                    repeats: int) -> dict[int, dict[int, float]]:
    """Per batch size B, ``target_latencies`` over B rows (eager, as the batched engine verifies)."""
    return {rows: target_latencies(model, prefix, sizes, repeats, rows=rows) for rows in batch_sizes}
