"""The generation loop shared by every method.

prefill -> first token -> repeat { adapter drafts a tree rooted at the newest
token; the target verifies the whole tree in one forward; the cache keeps the
accepted path; the adapter learns the verdict } until EOS or max_new_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.adapter import DraftAdapter, StepContext
from harness.counters import GenerationCounters
from harness.errors import DraftcountError
from harness.forward import LMOutput, positions, run_model
from harness.kv_cache import keep_tree_path
from harness.models import LoadedModel
from harness.sampling import SamplingConfig, next_token
from harness.engine_runtime import EngineRuntime
from harness.timing import Stopwatch
from harness.transfer import to_device
from harness.tree import TokenTree, check_batch_size_one, tree_attention_bias
from harness.verify import Verifier, verify_tree


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


def generate(
    target: LoadedModel,
    adapter: DraftAdapter,
    prompt_ids: torch.Tensor,
    max_new_tokens: int,
    sampling: SamplingConfig,
    eos_token_ids: frozenset[int] = frozenset(),
    generator: torch.Generator | None = None,
    verify: Verifier = verify_tree,
    prompt_name: str = "",
    runtime: EngineRuntime | None = None,
) -> Generation:
    """Generate up to ``max_new_tokens`` tokens after ``prompt_ids`` (1, L) with ``adapter`` drafting.

    ``runtime`` says how the target runs (KV cache kind, CUDA graphs, compile); default: plain eager with a
    DynamicCache. Pass one runtime to every generation of a run so its static cache and graphs are reused.
    """
    check_batch_size_one(prompt_ids, "generate")
    if max_new_tokens < 1:
        raise DraftcountError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    prompt_len = prompt_ids.shape[-1]
    check_fits_context(target, prompt_len, max_new_tokens, adapter.max_draft_nodes, prompt_name or "(unnamed)")
    runtime = runtime or EngineRuntime(target)
    target = runtime.target
    counters = GenerationCounters()
    ctx = StepContext(sampling, generator, counters, target.vocab_size, runtime, prompt_len + max_new_tokens + 1)
    hidden = adapter.wants_target_hidden_states
    layers = getattr(adapter, "target_hidden_layers", None)  # the hidden states it reads (None: all)
    separate_root = getattr(adapter, "separate_root_forward", False)
    prompt_ids = prompt_ids.to(target.device)
    with torch.inference_mode():
        stopwatch = Stopwatch(target.device)
        cache = runtime.cache_for(ctx.max_sequence, adapter.max_draft_nodes)
        prefill = run_model(
            target, prompt_ids, cache, positions(0, prompt_len, target.device), counters.target,
            logits_to_keep=0 if hidden else 1, output_hidden_states=hidden, hidden_layers=layers,
        )
        first = next_token(prefill.logits[:, -1], sampling, generator)
        produced = [int(first.item())]
        counters.record_prefill()
        adapter.begin(ctx, prompt_ids, prefill)
        counters.prefill_seconds = stopwatch.elapsed()
        sequence = torch.cat([prompt_ids, first.reshape(1, 1)], dim=-1)
        while len(produced) < max_new_tokens and not eos_token_ids.intersection(produced[-1:]):
            prefix_len = sequence.shape[-1] - 1
            if separate_root:
                tree, target_out = _verify_root_apart(runtime, adapter, ctx, sequence, cache, hidden, layers)
            else:
                tree = adapter.propose(ctx, sequence)
                target_out = runtime.verify(tree, cache, prefix_len, counters.target, hidden, layers)
            verdict = verify(tree, target_out.logits[0], sampling, generator)
            keep_tree_path(cache, prefix_len, list(verdict.path))
            counters.record_step(tree, verdict)
            adapter.commit(ctx, tree, verdict, target_out)
            step_tokens = list(verdict.new_tokens)
            produced.extend(step_tokens)
            if eos_token_ids.intersection(step_tokens):
                break
            sequence = torch.cat([sequence, to_device(torch.tensor([step_tokens]), sequence.device)], dim=-1)
        counters.wall_seconds = stopwatch.elapsed()
    output, counters.stop_reason = trim_output(produced, eos_token_ids, max_new_tokens)
    counters.new_tokens = len(output)
    return Generation(output_ids=output, counters=counters)
