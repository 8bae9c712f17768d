"""The generation loop shared by every method, one function per step (gpt-fast style).

``prefill`` (prompt -> first token) -> repeat ``decode_step`` { ``draft_and_run_target``: the adapter drafts a
tree rooted at the newest token and the target runs over the whole tree in one forward; ``accept``: the verifier
decides, the cache keeps the accepted path, the adapter learns the verdict } until EOS or max_new_tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from harness.engine.adapter import DraftAdapter, StepContext
from harness.engine.counters import GenerationCounters
from harness.errors import DraftcountError
from harness.backend.forward import LMOutput, positions, run_model
from harness.backend.kv_cache import keep_tree_path, refuse_drafting
from harness.backend.models import LoadedModel
from harness.verify.sampling import SamplingConfig, next_token
from harness.engine.runtime import EngineRuntime
from harness.backend.device import Stopwatch
from harness.backend.device import index_on
from harness.backend.phases import PhaseClock
from harness.trees.tree import TokenTree, check_batch_size_one, tree_attention_bias
from harness.verify import DEFAULT_VERIFIER, VERIFIERS, Verdict, Verifier, verify_tree


@dataclass
class Generation:
    output_ids: list[int]
    counters: GenerationCounters


def check_fits_context(target: LoadedModel, prompt_len: int, max_new_tokens: int, lookahead: int, name: str) -> None:
    """The prompt, the new tokens and one draft tree must fit the target's context."""
    context = target.context_length
    needed = prompt_len + max_new_tokens + lookahead
    if prompt_len == 0:
        raise DraftcountError(f"prompt {name} is empty")
    if context is not None and needed > context:
        raise DraftcountError(
            f"prompt {name} is {prompt_len} tokens; with max_new_tokens={max_new_tokens} and "
            f"{lookahead} draft tokens it needs {needed} positions, more than the model's context of {context}"
        )


def trim_output(tokens: list[int], eos_token_ids: frozenset[int], max_new_tokens: int) -> tuple[list[int], str]:
    """Cut after the first EOS (kept) and at max_new_tokens; say why generation stopped."""
    for index, token in enumerate(tokens[:max_new_tokens]):
        if token in eos_token_ids:
            return tokens[: index + 1], "eos"
    return tokens[:max_new_tokens], "max_new_tokens"


def _verify_root_apart(runtime: EngineRuntime, adapter: DraftAdapter, ctx: StepContext, sequence: torch.Tensor,
                       cache, hidden: bool, layers: tuple[int, ...] | None) -> tuple[TokenTree, LMOutput]:
    """Unfused verification: the root (the token the last step resampled) gets a target forward of its own,
    whose output the adapter sees before it drafts; then the drafts get a second forward (both graphed like the
    fused verify forward under ``cuda_graphs``)."""
    target = runtime.target
    prefix_len = sequence.shape[-1] - 1
    root_out = run_model(target, sequence[:, -1:], cache, positions(prefix_len, 1, target.device), ctx.counters.target,
                         output_hidden_states=hidden, graphs=runtime.graphs, hidden_layers=layers)
    adapter.observe_root(ctx, root_out)
    with ctx.counters.section("tree"):
        tree = adapter.propose(ctx, sequence)
    tree.resolve()  # the drafts' mask is built from the shape on the host: a read that fusion avoids
    if tree.size == 1:
        return tree, root_out
    drafts = list(range(1, tree.size))
    bias = tree_attention_bias(tree.parents, [0], drafts, target.dtype, target.device)
    rest = run_model(target, tree.tokens[1:].unsqueeze(0), cache, tree.position_ids(prefix_len)[:, 1:],
                     ctx.counters.target, attention_bias=bias, output_hidden_states=hidden, graphs=runtime.graphs,
                     hidden_layers=layers)
    states = None
    if hidden:
        states = tuple(None if a is None else torch.cat([a, b], dim=1)
                       for a, b in zip(root_out.hidden_states, rest.hidden_states))
    return tree, LMOutput(torch.cat([root_out.logits, rest.logits], dim=1), states, root_out.flops + rest.flops)


def prefill(runtime: EngineRuntime, adapter: DraftAdapter, ctx: StepContext, prompt_ids: torch.Tensor,
            cache: Cache) -> tuple[torch.Tensor, int]:
    """The prompt through the target; the first new token; the adapter started. Returns the sequence so far and
    the first token (read on the host before the adapter starts, as part of the prefill)."""
    target = runtime.target
    hidden = adapter.wants_target_hidden_states
    prompt_len = prompt_ids.shape[-1]
    out = run_model(
        target, prompt_ids, cache, positions(0, prompt_len, target.device), ctx.counters.target,
        logits_to_keep=0 if hidden else 1, output_hidden_states=hidden, hidden_layers=adapter.target_hidden_layers,
        media=ctx.media,
    )
    with ctx.counters.phase("verify"):
        first = next_token(out.logits[:, -1], ctx.sampling, ctx.generator)
        first_id = int(first.item())
    ctx.counters.record_prefill()
    ctx.tokens[:] = [*prompt_ids[0].tolist(), first_id]  # the host's copy of the sequence, read with the prefill
    adapter.begin(ctx, prompt_ids, out)
    return torch.cat([prompt_ids, first.reshape(1, 1)], dim=-1), first_id


def draft_and_run_target(runtime: EngineRuntime, adapter: DraftAdapter, ctx: StepContext, sequence: torch.Tensor,
                         cache: Cache, draws_in_graph: bool = False) -> tuple[TokenTree, LMOutput]:
    """The adapter's tree rooted at the newest token, and the target's forward over it (one forward when fused,
    root and drafts apart when the adapter asks for ``separate_root_forward``)."""
    hidden, layers = adapter.wants_target_hidden_states, adapter.target_hidden_layers
    if adapter.separate_root_forward:
        return _verify_root_apart(runtime, adapter, ctx, sequence, cache, hidden, layers)
    with ctx.counters.section("tree"):
        tree = adapter.propose(ctx, sequence)
    sampled = ctx.sampling if draws_in_graph else None  # the default verifier's draws, made in the target's graph
    return tree, runtime.verify(tree, cache, sequence.shape[-1] - 1, ctx.counters.target, hidden, layers, sampled,
                                ctx.generator)


def accept(verify: Verifier, adapter: DraftAdapter, ctx: StepContext, tree: TokenTree, target_out: LMOutput,
           cache: Cache, prefix_len: int) -> Verdict:
    """Verify the tree, keep the accepted path in the target's cache, count, tell the adapter; the verdict."""
    with ctx.counters.phase("verify"):
        given = ({"choices": target_out.choices} if ctx.sampling.is_greedy and target_out.choices is not None
                 else {"draws": target_out.draws} if target_out.draws is not None else {})
        verdict = verify(tree, target_out.logits[0], ctx.sampling, ctx.generator, **given)
    keep_tree_path(cache, prefix_len, list(verdict.path), ctx.runtime.graphs if ctx.runtime is not None else None)
    ctx.counters.record_step(tree, verdict)
    adapter.commit(ctx, tree, verdict, target_out)
    return verdict


def decode_step(runtime: EngineRuntime, adapter: DraftAdapter, ctx: StepContext, sequence: torch.Tensor,
                cache: Cache, verify: Verifier) -> tuple[list[int], torch.Tensor | None]:
    """One speculative step: draft a tree, run the target over it, accept what verification keeps. Returns the new
    tokens and, when they are on the device already (greedy, a path 0, 1, ..., a: ``choices[: a + 1]``), those."""
    tree, target_out = draft_and_run_target(runtime, adapter, ctx, sequence, cache, verify is verify_tree)
    verdict = accept(verify, adapter, ctx, tree, target_out, cache, sequence.shape[-1] - 1)
    along = ctx.sampling.is_greedy and list(verdict.path) == list(range(len(verdict.path)))
    return list(verdict.new_tokens), target_out.choices if along else None


class SequenceBuffer:
    """The sequence on the device, in a buffer of the generation's longest length: a step's new tokens are written
    after it (one copy) and the sequence is a view of the filled part, instead of a concatenation per step."""

    def __init__(self, start: torch.Tensor, capacity: int) -> None:
        self.buffer = torch.zeros((1, max(capacity, start.shape[-1])), dtype=start.dtype, device=start.device)
        self.length = start.shape[-1]
        self.buffer[:, : self.length] = start

    def extend(self, new: list[int], choices: torch.Tensor | None) -> torch.Tensor:
        """Append ``new`` (device tokens ``choices``' first ones when they are these, else from the host)."""
        end = self.length + len(new)
        if choices is not None and choices.shape[0] >= len(new):
            self.buffer[0, self.length:end].copy_(choices[: len(new)])  # the greedy choices along a 0..a path
        else:
            self.buffer[0, self.length:end].copy_(index_on(new, self.buffer.device))
        self.length = end
        return self.buffer[:, :end]


def generation_steps(
    target: LoadedModel,
    adapter: DraftAdapter,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    sampling: SamplingConfig,
    eos_token_ids: frozenset[int] = frozenset(),
    generator: torch.Generator | None = None,
    verify: Verifier = VERIFIERS[DEFAULT_VERIFIER],
    prompt_name: str = "",
    runtime: EngineRuntime | None = None,
    prompt_key: str = "",
    paused_between_steps: bool = False,
    media: Mapping[str, torch.Tensor] | None = None,
    clock: Callable[[torch.device], PhaseClock] = PhaseClock,
) -> Generator[None, None, Generation]:
    """``generate`` one step at a time: a generator that yields after the prefill and after every decoding step
    and returns the ``Generation``. With ``paused_between_steps`` (host-only devices) its timers stop while it
    is suspended, so two generations driven in turns, step by step (``run_interleaved``), each time only their
    own steps: what the runner does to compare a method with `ar` under the same machine conditions. ``media``: the
    prompt's other prefill inputs (a vision-language target's ``pixel_values``; decoding is text-only after it).
    ``clock``: makes the generation's phase clock (a counting one: ``harness.measure.diagnostics.dispatch``)."""
    check_batch_size_one(prompt_ids, "generate")
    if max_new_tokens < 1:
        raise DraftcountError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    prompt_len = prompt_ids.shape[-1]
    check_fits_context(target, prompt_len, max_new_tokens, adapter.max_draft_nodes, prompt_name or "(unnamed)")
    runtime = runtime or EngineRuntime(target)
    target = runtime.target
    if adapter.max_draft_nodes:
        refuse_drafting(type(adapter).__name__, runtime.rollback_refusal)
    counters = GenerationCounters()
    media = {name: value.to(target.device) for name, value in (media or {}).items()}
    ctx = StepContext(sampling, generator, counters, target.vocab_size, runtime, prompt_len + max_new_tokens + 1,
                      prompt_key, media=media)
    prompt_ids = prompt_ids.to(target.device)
    stopwatch = Stopwatch(target.device)
    counters.start_clock(clock(target.device))
    with torch.inference_mode():  # not held across a yield: another generation may run in between
        cache = runtime.cache_for(ctx.max_sequence, adapter.max_draft_nodes)
        sequence, first_id = prefill(runtime, adapter, ctx, prompt_ids, cache)
    produced = [first_id]
    tokens = SequenceBuffer(sequence, prompt_len + max_new_tokens + adapter.max_draft_nodes + 1)
    counters.prefill_seconds = stopwatch.elapsed()
    while len(produced) < max_new_tokens and not eos_token_ids.intersection(produced[-1:]):
        if paused_between_steps:
            stopwatch.pause()
            counters.clock.pause()
        yield
        if paused_between_steps:
            counters.clock.resume()
            stopwatch.resume()
        with torch.inference_mode():
            step_tokens, choices = decode_step(runtime, adapter, ctx, sequence, cache, verify)
            produced.extend(step_tokens)
            ctx.tokens.extend(step_tokens)
            if eos_token_ids.intersection(step_tokens):
                break
            sequence = tokens.extend(step_tokens, choices)
    counters.wall_seconds = stopwatch.elapsed()
    counters.stop_clock()
    output, counters.stop_reason = trim_output(produced, eos_token_ids, max_new_tokens)
    counters.new_tokens = len(output)
    return Generation(output_ids=output, counters=counters)


def run_interleaved(steps: list[Generator[None, None, Generation]]) -> list[Generation]:
    """Drive generations in turns, one step of each in list order, until all have finished; their results."""
    results: list[Generation | None] = [None] * len(steps)
    live = list(range(len(steps)))
    while live:
        for index in list(live):
            try:
                next(steps[index])
            except StopIteration as done:
                results[index] = done.value
                live.remove(index)
    return results


def generate(
    target: LoadedModel,
    adapter: DraftAdapter,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    sampling: SamplingConfig,
    eos_token_ids: frozenset[int] = frozenset(),
    generator: torch.Generator | None = None,
    verify: Verifier = VERIFIERS[DEFAULT_VERIFIER],
    prompt_name: str = "",
    runtime: EngineRuntime | None = None,
    prompt_key: str = "",
    media: Mapping[str, torch.Tensor] | None = None,
) -> Generation:
    """Generate up to ``max_new_tokens`` tokens after ``prompt_ids`` (1, L) with ``adapter`` drafting.

    ``runtime`` says how the target runs (KV cache kind, CUDA graphs, compile); default: plain eager with a
    DynamicCache. Pass one runtime to every generation of a run so its static cache and graphs are reused.
    ``prompt_key`` names what is answered (the runner gives every sample of one prompt and turn the same key).
    ``media``: the prompt's image for a vision-language target (``{"pixel_values": ...}``), prefilled with it.
    """
    return run_interleaved([generation_steps(target, adapter, prompt_ids, max_new_tokens, sampling, eos_token_ids,
                                             generator, verify, prompt_name, runtime, prompt_key, media=media)])[0]
