"""The narrow contract between the engine and a method.

An adapter proposes draft trees and keeps its own drafter state; the engine
owns the target, its KV cache, verification, timing and counters. One adapter
instance serves many generations: ``begin`` resets it for each one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from transformers import PretrainedConfig
from transformers.cache_utils import Cache

from harness.counters import GenerationCounters
from harness.forward import LMOutput
from harness.kv_cache import new_cache
from harness.sampling import SamplingConfig
from harness.tree import TokenTree, root_only
from harness.verify import Verdict

if TYPE_CHECKING:
    from harness.cuda_graphs import GraphedForwards
    from harness.engine_runtime import EngineRuntime


@dataclass
class StepContext:
    """What a method may read while it drafts: sampling settings, the random generator, the counters, and
    the run's engine runtime (where a drafter gets its KV cache and, with CUDA graphs, its graph runner)."""

    sampling: SamplingConfig
    generator: torch.Generator | None
    counters: GenerationCounters
    target_vocab_size: int
    runtime: EngineRuntime | None = None  # None: dynamic caches, eager forwards
    max_sequence: int = 0  # the longest the sequence can grow in this generation (prompt + new tokens + 1)

    def drafter_cache(self, owner: object, config: PretrainedConfig, lookahead: int, dtype: torch.dtype,
                      device: torch.device) -> Cache:
        """An empty KV cache for ``owner``'s drafter, which holds at most the sequence plus ``lookahead``
        positions: static (and reused across generations) under ``kv_cache=static``, else a DynamicCache."""
        if self.runtime is None:
            return new_cache(config)
        return self.runtime.drafter_cache(owner, config, self.max_sequence, lookahead, dtype, device)

    def drafter_graphs(self, owner: object, config: PretrainedConfig, device: torch.device,
                       dtype: torch.dtype) -> GraphedForwards | None:
        """``owner``'s CUDA-graph runner for the fixed-shape steps of its drafter (a model of ``config``) under
        ``cuda_graphs=on``, else None."""
        return self.runtime.drafter_graphs(owner, config, device, dtype) if self.runtime is not None else None


class DraftAdapter(Protocol):
    """What a method implements.

    wants_target_hidden_states: the engine returns the target's hidden states
        (embeddings + every layer) with each target forward. An adapter that
        reads only some may say which in ``target_hidden_layers`` (a tuple of
        indices into them, negative from the end): the others are then None,
        and a graphed verify forward copies out only those.
    max_draft_nodes: the most draft nodes (root excluded) one tree may hold;
        used to check that generation fits the target's context.
    An adapter may also carry ``details``: a JSON-friendly dict recorded with
    every result (the tree shape it drafts, say), and ``separate_root_forward =
    True`` (unfused verification): the engine then runs the root through the
    target alone and calls ``observe_root(ctx, root_out)`` before ``propose``,
    and verifies the drafts in a second forward.
    """

    wants_target_hidden_states: bool
    max_draft_nodes: int

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        """Start a generation: ``prompt_ids`` (B, L) were just prefilled into the target."""

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        """Draft a tree whose root is ``sequence[:, -1]`` (the newest token, not yet in the target's cache)."""

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        """Learn what was accepted; ``target_out`` is the target's forward over ``tree``."""


class NoDrafts:
    """Drafts nothing: every tree is just its root, so each step is one autoregressive target forward.

    The `ar` baseline, and any plain greedy/sampled continuation the harness needs.
    """

    wants_target_hidden_states = False
    max_draft_nodes = 0

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        pass

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        return root_only(sequence[0, -1])

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        pass
