"""How the engine runs the target: the overhead switches, one object per run.

``EngineOptions`` (typed, unknown keys are errors; ``--engine KEY=VALUE`` on
the command line, ``bench.engine`` in the workflow config):

kv_cache: ``dynamic`` (transformers' DynamicCache: every forward concatenates,
    a rejected path is cropped) or ``static`` (``harness.static_cache``:
    buffers preallocated once per run, accepted paths gathered in place).
cuda_graphs: ``on`` replays the target's verify forward from a CUDA graph per
    tree size (``harness.cuda_graphs``; needs ``kv_cache=static`` and a CUDA
    device). The drafters' own forwards are not graphed.
compile: ``on`` wraps the target in ``torch.compile`` (``compile_mode``,
    ``compile_backend``; dynamic shapes). With ``cuda_graphs=on`` the compiled module is what gets
    captured, so use a mode without its own CUDA graphs (``default``,
    ``max-autotune-no-cudagraphs``).

A ``TargetRuntime`` holds what lives across generations: the static cache
(regrown, and its graphs dropped, only when a generation needs more room) and
the captured graphs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch
from transformers.cache_utils import Cache

from harness.cuda_graphs import GraphedVerifier
from harness.forward import ForwardTally, LMOutput, run_model
from harness.kv_cache import new_cache
from harness.models import LoadedModel
from harness.static_cache import new_static_cache, reset_static_cache, static_capacity
from harness.tree import TokenTree

CAPACITY_STEP = 256  # static caches are sized in multiples of this many positions


@dataclass(frozen=True)
class EngineOptions:
    kv_cache: Literal["dynamic", "static"] = "dynamic"
    cuda_graphs: Literal["off", "on"] = "off"
    compile: Literal["off", "on"] = "off"
    compile_mode: Literal["default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune"] = "default"
    compile_backend: Literal["inductor", "aot_eager", "eager"] = "inductor"  # the latter two: for debugging

    def __post_init__(self) -> None:
        if self.cuda_graphs == "on" and self.kv_cache != "static":
            raise ValueError("cuda_graphs=on needs kv_cache=static (captured forwards need fixed cache addresses)")
        if self.cuda_graphs == "on" and self.compile == "on" and self.compile_mode in ("reduce-overhead", "max-autotune"):
            raise ValueError(f"compile_mode={self.compile_mode} captures CUDA graphs itself; with cuda_graphs=on use "
                             "default or max-autotune-no-cudagraphs")


def static_capacity_for(needed: int) -> int:
    """Positions a static cache allocates for a generation that needs ``needed``."""
    return -(-needed // CAPACITY_STEP) * CAPACITY_STEP


class TargetRuntime:
    """The target as the engine runs it under ``options`` (see the module docstring)."""

    def __init__(self, target: LoadedModel, options: EngineOptions = EngineOptions(), capture: bool = True) -> None:
        self.options = options
        if options.compile == "on":
            mode = options.compile_mode if options.compile_backend == "inductor" else None  # modes are inductor's
            compiled = torch.compile(target.model, backend=options.compile_backend, mode=mode, dynamic=True)
            target = dataclasses.replace(target, model=compiled)
        self.target = target
        self.graphs = GraphedVerifier(target, capture=capture) if options.cuda_graphs == "on" else None
        self.static_cache: Cache | None = None

    def cache_for(self, needed: int) -> Cache:
        """An empty cache with room for ``needed`` positions."""
        if self.options.kv_cache == "dynamic":
            return new_cache(self.target.config)
        if self.static_cache is None or static_capacity(self.static_cache) < needed:
            self.static_cache = new_static_cache(self.target.config, static_capacity_for(needed))
        reset_static_cache(self.static_cache)
        return self.static_cache

    def verify(self, tree: TokenTree, cache: Cache, prefix_len: int, tally: ForwardTally, hidden: bool) -> LMOutput:
        """The target's forward over the whole ``tree`` rooted after ``prefix_len`` cached positions."""
        if self.graphs is not None:
            return self.graphs.forward(tree, cache, prefix_len, tally, hidden)
        return run_model(self.target, tree.tokens.unsqueeze(0), cache, tree.position_ids(prefix_len), tally,
                         attention_bias=tree.attention_bias(prefix_len, self.target.dtype),
                         output_hidden_states=hidden)

