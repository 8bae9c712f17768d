"""Latencies at realistic shapes (random weights) and the speedups they project from measured acceptance.

The target is shaped like Llama-3.1-8B, the draft LM like Llama-3.2-1B, and the EAGLE head and the
Lyanna drafter are built at the target's width by the same code the methods use. Latencies are
medians of repeated forwards after warm-up, timed with CUDA events on a GPU (``perf_counter``
elsewhere). A summary table's measured acceptance (tau and tokens verified per step, from the small
models) then gives, per variant,

    step seconds   = drafting seconds (the method's cost model below) + target(tokens verified per step)
    projected      = (accepted drafts per step + 1) x target(1) / step seconds

a projection at 8B scale under the assumption that acceptance carries over: not a measurement.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PretrainedConfig
from transformers.cache_utils import Cache

from harness.forward import prefix_visible
from harness.kv_cache import cache_argument, crop_cache, new_cache
from harness.static_cache import new_static_cache
from harness.tree import depths_of, tree_attention_bias

SHAPES: dict[str, dict[str, int]] = {
    "llama-3.1-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
    "llama-3.2-1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
}


def scaled_shape(shape: dict[str, int], divisor: int) -> dict[str, int]:
    """The shape with widths, heads, layers and vocabulary divided by ``divisor`` (for CPU checks)."""
    if divisor < 1:
        raise ValueError(f"divisor must be >= 1, got {divisor}")
    return {key: max(1, value // divisor) for key, value in shape.items()}


def random_llama(shape: dict[str, int], dtype: torch.dtype, device: str) -> LlamaForCausalLM:
    """A randomly initialised Llama of ``shape``, built directly in ``dtype`` on ``device``."""
    config = LlamaConfig(**shape, max_position_embeddings=16384, tie_word_embeddings=False)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def replay_of(run: Callable[[], object], device: torch.device, warmup: int) -> Callable[[], object]:
    """``run`` captured in a CUDA graph (after ``warmup`` calls on a side stream); returns its replay. ``run``
    must have fixed shapes and addresses from call to call (a static KV cache rewound to the same length)."""
    main = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        for _ in range(max(1, warmup)):
            run()
    main.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph.replay


TIMINGS = ("eager", "static", "cuda_graphs")  # how a timed forward runs; see ``timing_cache``


def check_timing(timing: str) -> None:
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {', '.join(TIMINGS)}, not {timing!r}")


def median_seconds(run: Callable[[], object], device: torch.device, repeats: int, warmup: int = 3,
                   timing: str = "eager") -> float:
    """Median wall time of ``run``: CUDA events on a GPU, perf_counter with no device otherwise. Under the
    ``cuda_graphs`` timing it times replays of ``run`` captured in a CUDA graph (``replay_of``), as a serving
    engine runs it; ``eager`` and ``static`` time ``run`` itself (its cache is ``timing_cache``'s business)."""
    check_timing(timing)
    if timing == "cuda_graphs":
        if device.type != "cuda":
            raise ValueError(f"graphed timing needs a CUDA device, not {device}")
        run = replay_of(run, device, warmup)
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            started = time.perf_counter()
            run()
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def timing_cache(config: PretrainedConfig, capacity: int, dtype: torch.dtype, device: torch.device,
                 timing: str) -> Cache:
    """The KV cache a timed forward runs on: transformers' DynamicCache under ``eager`` (forwards launched from
    Python, the cache grown by concatenation), a preallocated (static) one under ``static`` (the same
    forwards, written in place) and ``cuda_graphs`` (replayed from a CUDA graph): the two steps apart, so
    each one's effect shows on its own."""
    check_timing(timing)
    return new_cache(config) if timing == "eager" else new_static_cache(config, capacity, dtype, device)


def wide_tree(nodes: int, fan_out: int = 4) -> tuple[int, ...]:
    """Parents of a ``nodes``-node tree filled breadth first with ``fan_out`` children per node."""
    return (-1,) + tuple((index - 1) // fan_out for index in range(1, nodes))


@torch.no_grad()
def target_latencies(model: LlamaForCausalLM, prefix: int, sizes: list[int], repeats: int,
                     timing: str = "eager") -> dict[int, float]:
    """Seconds of one forward of ``size`` tree tokens (a wide tree, tree mask) after a ``prefix``-token cache
    (run as ``timing`` says: see ``timing_cache``)."""
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    cache = timing_cache(model.config, prefix + max(sizes), model.dtype, device, timing)
    cached = cache_argument(model, cache)
    model(input_ids=torch.randint(vocab, (1, prefix), device=device), use_cache=True, **cached)
    latencies = {}
    for size in sizes:
        parents = wide_tree(size)
        bias = prefix_visible(tree_attention_bias(parents, [], list(range(size)), model.dtype, device), prefix + size)
        position_ids = (prefix + torch.tensor(depths_of(parents))).to(device)[None]
        input_ids = torch.randint(vocab, (1, size), device=device)

        def forward() -> None:
            model(input_ids=input_ids, attention_mask=bias, position_ids=position_ids, use_cache=True, **cached)
            crop_cache(cache, prefix)

        latencies[size] = median_seconds(forward, device, repeats, timing=timing)
    return latencies


@torch.no_grad()
def eagle_step_latency(target: LlamaForCausalLM, top_k: int, prefix: int, repeats: int,
                       timing: str = "eager") -> float:
    """One EAGLE-2 expansion: the head on ``top_k`` frontier nodes (tree mask over its cache) + their logits."""
    from methods.eagle_head import FeatureSpec, new_head

    device = next(target.parameters()).device
    lm_head = target.get_output_embeddings().weight
    head = new_head(target.config, lm_head.shape[0], target.get_input_embeddings().weight,
                    FeatureSpec("none", ("last",)), seed=0).to(device, target.dtype).eval()
    hidden = target.config.hidden_size
    cache = timing_cache(head.config, prefix + top_k, target.dtype, device, timing)
    head(torch.randn(1, prefix, hidden, device=device, dtype=target.dtype),
         torch.randint(lm_head.shape[0], (1, prefix), device=device),
         torch.arange(prefix, device=device)[None], cache)
    features = torch.randn(1, top_k, hidden, device=device, dtype=target.dtype)
    tokens = torch.randint(lm_head.shape[0], (1, top_k), device=device)
    positions = torch.full((1, top_k), prefix, device=device)
    bias = torch.full((1, 1, top_k, prefix + top_k), torch.finfo(target.dtype).min, device=device, dtype=target.dtype)
    bias[..., :prefix] = 0
    bias[0, 0, torch.arange(top_k), prefix + torch.arange(top_k)] = 0

    def step() -> None:
        states = head(features, tokens, positions, cache, bias)
        torch.log_softmax((states @ lm_head.T).float(), dim=-1)
        crop_cache(cache, prefix)

    return median_seconds(step, device, repeats, timing=timing)


@torch.no_grad()
def lyanna_depth_latency(target: LlamaForCausalLM, top_k: int, prefix: int, repeats: int,
                         timing: str = "eager") -> float:
    """One Lyanna depth: one backbone state, its LM-head logits, and the token-info logits of ``top_k`` nodes."""
    from methods.lyanna_model import LyannaArch, new_drafter

    device = next(target.parameters()).device
    drafter = new_drafter(target, LyannaArch(), None, seed=0).to(device, target.dtype).eval()
    hidden = target.config.hidden_size
    cache = timing_cache(drafter.config, prefix + 1, target.dtype, device, timing)
    drafter(torch.randn(1, prefix, hidden, device=device, dtype=target.dtype),
            torch.arange(prefix, device=device)[None], cache)
    state_input = torch.randn(1, 1, hidden, device=device, dtype=target.dtype)
    position = torch.full((1, 1), prefix, device=device)
    parents = torch.randint(drafter.full_vocab, (1, top_k), device=device)

    def depth() -> None:
        states = drafter(drafter.own_inputs(state_input), position, cache)
        logits = drafter.node_logits(states[:, -1:], parents, drafter.state_logits(states[:, -1:]))
        torch.log_softmax(logits.float(), dim=-1)
        crop_cache(cache, prefix)

    return median_seconds(depth, device, repeats, timing=timing)


@dataclass(frozen=True)
class Latencies:
    """Seconds per call at the measured shapes (see ``measure_latencies``)."""

    target: dict[int, float]  # tree tokens -> one target forward
    draft_lm: dict[int, float]  # tokens -> one draft-LM forward
    eagle_step: float  # one expansion of top_k nodes
    lyanna_depth: float  # one depth: a state and its nodes' logits
    top_k: int

    def target_at(self, tokens: float) -> float:
        sizes = sorted(self.target)
        return float(np.interp(tokens, sizes, [self.target[size] for size in sizes]))

    def draft_at(self, tokens: float) -> float:
        sizes = sorted(self.draft_lm)
        return float(np.interp(tokens, sizes, [self.draft_lm[size] for size in sizes]))

    def table(self) -> pd.DataFrame:
        rows = [{"component": "target", "tokens": size, "ms": seconds * 1e3} for size, seconds in self.target.items()]
        rows += [{"component": "draft_lm", "tokens": size, "ms": s * 1e3} for size, s in self.draft_lm.items()]
        rows += [{"component": "eagle_step", "tokens": self.top_k, "ms": self.eagle_step * 1e3},
                 {"component": "lyanna_depth", "tokens": self.top_k, "ms": self.lyanna_depth * 1e3}]
        return pd.DataFrame(rows)


def tree_level_widths(options: dict) -> list[int] | None:
    """Nodes per depth of a tree_sd tree: SpecInfer's branching, or a Sequoia tree file (None if absent)."""
    if options.get("policy", "specinfer") == "specinfer":
        branching = options.get("branching") or []
        if isinstance(branching, str):
            branching = branching.split(",")
        return [int(width) for width in np.cumprod([int(b) for b in branching])] or None
    tree_file = Path(str(options.get("tree_file") or ""))
    if not tree_file.is_file():
        return None
    parents = tuple(json.loads(tree_file.read_text())["parents"])
    depths = depths_of(parents)
    return [depths.count(depth) for depth in range(1, max(depths, default=0) + 1)] or [0]


def drafting_seconds(method: str, options: dict, latencies: Latencies) -> float:
    """The cost model of one step's drafting, per method (math.nan for methods it does not cover).

    sd: gamma draft-LM forwards of one token; tree_sd (SpecInfer branching): one draft-LM forward per
    tree level, as wide as the level; eagle: a catch-up forward on the accepted tokens, then one
    expansion of top-k nodes per depth (depth + 1 head steps); lyanna: a catch-up and one step per
    depth, each one backbone state whatever the number of nodes (depth + 1 depth steps). Sequoia's
    trees (no branching list) and unknown methods are not covered."""
    if method == "ar":
        return 0.0
    if method == "sd":
        return int(options.get("gamma", 4)) * latencies.draft_at(1)
    if method == "tree_sd":
        widths = tree_level_widths(options)
        if widths is None:
            return math.nan
        # the draft LM feeds the root, then every level but the last (whose nodes have no children)
        return latencies.draft_at(1) + sum(latencies.draft_at(float(width)) for width in widths[:-1])
    depth = int(options.get("depth", 5))
    if method == "eagle":
        return (depth + 1) * latencies.eagle_step
    if method == "lyanna":
        return (depth + 1) * latencies.lyanna_depth
    return math.nan


def project_speedups(summary: pd.DataFrame, latencies: Latencies) -> pd.DataFrame:
    """Per summary row: the drafting and verification seconds of a step at the measured shapes, and the
    projected speedup, next to the measured (small-model) tau and speedup."""
    rows = []
    for _, row in summary.iterrows():
        options = json.loads(row.get("options") or "{}")
        drafting = drafting_seconds(row.method, options, latencies)
        verify = latencies.target_at(max(1.0, row.verified_per_step))
        step = drafting + verify
        tokens_per_step = row.accepted_per_step + 1
        rows.append({
            "variant": row.variant, "method": row.method, "dataset": row.dataset, "temperature": row.temperature,
            "tau": row.tau, "verified_per_step": row.verified_per_step,
            "measured_speedup": row.get("speedup_paired_mean", math.nan),
            "draft_ms": drafting * 1e3, "verify_ms": verify * 1e3,
            "projected_speedup": tokens_per_step * latencies.target_at(1) / step,
        })
    return pd.DataFrame(rows)
