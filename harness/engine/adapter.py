"""The narrow contract between the engine and a method.

An adapter proposes draft trees and keeps its own drafter state; the engine
owns the target, its KV cache, verification, timing and counters. One adapter
instance serves many generations: ``begin`` resets it for each one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

import torch
from transformers import PretrainedConfig
from transformers.cache_utils import Cache

from harness.engine.counters import GenerationCounters
from harness.backend.forward import LMOutput
from harness.backend.kv_cache import new_cache
from harness.verify.sampling import SamplingConfig
from harness.trees.tree import TokenTree, root_only
from harness.verify.verdict import Verdict

if TYPE_CHECKING:
    from harness.backend.cuda_graphs import GraphedForwards
    from harness.engine.runtime import EngineRuntime


WARM_UP_KEY = "(warm-up)"  # the prompt key of untimed warm-up generations (a method that learns across requests skips them)


@dataclass
class StepContext:
    """What a method may read while it drafts: sampling settings, the random generator, the counters, the
    run's engine runtime (where a drafter gets its KV cache and, with CUDA graphs, its graph runner), which
    prompt is answered (a method that learns across samples of one prompt keys its state by it), and the sequence
    so far on the host (``tokens``: the prompt, the first token and every token verification emitted, kept by the
    engine from the verifier's one read, so a method that matches tokens on the host reads nothing more) and the
    prompt's media (``media``: a vision-language target's image, prefilled with the prompt)."""

    sampling: SamplingConfig
    generator: torch.Generator | None
    counters: GenerationCounters
    target_vocab_size: int
    runtime: EngineRuntime | None = None  # None: dynamic caches, eager forwards
    max_sequence: int = 0  # the longest the sequence can grow in this generation (prompt + new tokens + 1)
    prompt_key: str = ""  # what this generation answers, the same for every sample of one prompt and turn
    tokens: list[int] = field(default_factory=list)  # the sequence so far, on the host (the engine extends it)
    media: Mapping[str, torch.Tensor] = field(default_factory=dict)  # the prompt's other prefill inputs (an image's
    # pixel_values for a vision-language target), read by a drafter that sees them

    def drafter_cache(self, owner: object, config: PretrainedConfig, lookahead: int, dtype: torch.dtype,
                      device: torch.device) -> Cache:
        """An empty KV cache for ``owner``'s drafter, which holds at most the sequence plus ``lookahead``
        positions: static (and reused across generations) under ``kv_cache=static``, else a DynamicCache."""
        if self.runtime is None:
            return new_cache(config)
        return self.runtime.drafter_cache(owner, config, self.max_sequence, lookahead, dtype, device)

    def graph_generator(self) -> torch.Generator | None:
        """The generator a drafter's graphed block draws from (``EngineRuntime.draw_generator``): the run's own
        without a runtime or on the CPU."""
        return self.generator if self.runtime is None else self.runtime.draw_generator(self.generator)

    def drafter_graphs(self, owner: object, config: PretrainedConfig, device: torch.device,
                       dtype: torch.dtype) -> GraphedForwards | None:
        """``owner``'s CUDA-graph runner for the fixed-shape steps of its drafter (a model of ``config``) under
        ``cuda_graphs=on``, else None."""
        return self.runtime.drafter_graphs(owner, config, device, dtype) if self.runtime is not None else None


@dataclass
class BatchRow:
    """One request of the batch: its sampling context (generator, counters, the host's tokens), its prompt,
    where it stands, what it emitted."""

    ctx: StepContext
    prompt: torch.Tensor  # (1, L), unpadded
    position: int  # the root's position (unpadded): the next slot the row's sequence fills
    root: int = 0  # the newest token, emitted, not yet in the target's cache
    produced: list[int] = field(default_factory=list)
    pending: int | None = None  # a draft LM's accepted draft it never fed (a leaf of its shape)
    finished_at: float = 0.0  # seconds from the batch's start until the row's last token

    def sequence(self) -> torch.Tensor:
        """The prompt and every emitted token (1, L + produced), the root last: what an adapter drafts from."""
        return torch.cat([self.prompt, torch.tensor([self.produced], device=self.prompt.device)], dim=-1)


class RowsDrafting(Protocol):
    """How the rows of a static batch draft (``harness.engine.batched`` calls these, in this order each step).

    wants_hidden / hidden_layers: the target's hidden states the drafting reads (as ``DraftAdapter``'s).
    prefill: the batch's prompts (left-padded ids, valid slots, positions) went through the target as ``out``.
    draft: every live row's tree, each resolved (its shape on the host).
    accepted: every row's verdict on its tree and the target's output over the padded trees.
    select: only the rows ``keep`` (indices into the live rows) stay in the batch.
    """

    wants_hidden: bool
    hidden_layers: tuple[int, ...] | None

    def prefill(self, rows: list[BatchRow], ids: torch.Tensor, valid: torch.Tensor, position_ids: torch.Tensor,
                out: LMOutput) -> None: ...

    def draft(self, rows: list[BatchRow]) -> list[TokenTree]: ...

    def accepted(self, rows: list[BatchRow], trees: list[TokenTree], verdicts: list[Verdict],
                 out: LMOutput) -> None: ...

    def select(self, keep: torch.Tensor) -> None: ...


class DraftAdapter(Protocol):
    """What a method implements: every attribute and hook the engine reads is declared here.

    wants_target_hidden_states: the engine returns the target's hidden states
        (embeddings + every layer) with each target forward.
    target_hidden_layers: the hidden states the adapter reads (a tuple of
        indices into them, negative from the end), or None for all of them;
        the others are then None, and a graphed verify forward copies out
        only those.
    max_draft_nodes: the most draft nodes (root excluded) one tree may hold;
        used to check that generation fits the target's context.
    separate_root_forward: False (fused verification): the root and the
        drafts go through one target forward. True (unfused): the engine runs
        the root through the target alone and calls ``observe_root`` before
        ``propose``, then verifies the drafts in a second forward.
    details: a JSON-friendly dict recorded with every result (the tree shape
        it drafts, say).
    """

    wants_target_hidden_states: bool
    target_hidden_layers: tuple[int, ...] | None
    max_draft_nodes: int
    separate_root_forward: bool
    details: Mapping[str, Any]

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        """Start a generation: ``prompt_ids`` (B, L) were just prefilled into the target."""

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        """Draft a tree whose root is ``sequence[:, -1]`` (the newest token, not yet in the target's cache)."""

    def observe_root(self, ctx: StepContext, root_out: LMOutput) -> None:
        """Unfused verification only: the target's forward over the root, before ``propose``."""

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        """Learn what was accepted; ``target_out`` is the target's forward over ``tree``."""

    def batch_row(self) -> DraftAdapter | None:
        """A copy that drafts one row of a static batch (``harness.engine.batched``): the weights shared, its
        generation state its own (``begin`` resets it); None: the adapter decodes one request at a time."""

    def batch_drafting(self, count: int) -> RowsDrafting | None:
        """A drafter of ``count`` rows of a static batch at once (one forward per draft step for the whole batch, with
        ``harness.engine.batched``'s rows hooks: prefill, draft, accepted, select), or None: the rows draft one
        after another, each through a ``batch_row`` copy."""


class AdapterBase:
    """The defaults of ``DraftAdapter``: no hidden states, fused verification, no details, nothing to do at
    ``begin``, ``observe_root`` and ``commit``, and no batch rows. Adapters inherit from it and override what they
    need; ``propose`` is theirs to write."""

    wants_target_hidden_states: bool = False
    target_hidden_layers: tuple[int, ...] | None = None
    max_draft_nodes: int = 0
    separate_root_forward: bool = False

    details: Mapping[str, Any] = MappingProxyType({})  # an adapter sets its own dict

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        pass

    def observe_root(self, ctx: StepContext, root_out: LMOutput) -> None:
        pass

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        pass

    def batch_row(self) -> DraftAdapter | None:
        return None

    def batch_drafting(self, count: int) -> RowsDrafting | None:
        return None


class NoDrafts(AdapterBase):
    """Drafts nothing: every tree is just its root, so each step is one autoregressive target forward.

    The `ar` baseline, and any plain greedy/sampled continuation the harness needs.
    """

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        return root_only(sequence[0, -1])
