"""Static-batch decoding: B prompts decoded together, each row lossless on its own (the load study's engine).

The rows share one target forward per step and one KV cache whose slots grow by the same count for every row;
what differs per row is which slots it may attend (``SlotMask``: its prompt without the left padding, and the
accepted path of every step; a rejected or padding node's slot stays in the cache, masked) and its positions. So
no row's cache is ever compacted, rows never wait for each other's acceptance, and a finished row leaves the
batch (its cache rows are dropped). Per step: the rows draft (``rows_drafting``) -> ``run_target_rows`` (the
target over every row's tree, padded to one node count) -> ``verify_rows`` (the shared verifier per row, with the
row's own random generator, so a row's output has the law of a batch-1 generation) -> the drafting learns.

How the rows draft: `ar` not at all; a draft LM over a fixed tree shape (`sd`, `tree_sd`) level by level for all
rows at once (``harness.engine.batch_draft_lm``); an adapter with a drafter of its own for the whole batch
(``batch_drafting``: `eagle`'s head, one forward per draft step, ``methods.eagle.batch``; `lyanna`'s backbone,
``methods.lyanna.batch``; `dflash`'s one forward, ``methods.dflash.batch``); an adapter that drafts batch rows
(``batch_row``: the EAGLE variants, `lyanna` reusing states) with one copy per row, one row after another
(``harness.engine.batch_adapters``). Others are refused with one line.
"""

from __future__ import annotations

import torch

from harness.backend.device import Stopwatch
from harness.backend.forward import ForwardTally, LMOutput, run_model
from harness.backend.kv_cache import eager_refusal, new_cache
from harness.backend.models import LoadedModel
from harness.engine.adapter import BatchRow, NoDrafts, RowsDrafting, StepContext
from harness.engine.batch_adapters import AdapterRows, RootOnlyRows
from harness.engine.batch_draft_lm import DraftLMRows
from harness.engine.batch_slots import SlotMask, causal, charge_rows, left_padded, pad_trees
from harness.engine.counters import GenerationCounters
from harness.engine.draft_lm import DraftLMAdapter
from harness.engine.loop import Generation, check_fits_context, trim_output
from harness.errors import DraftcountError
from harness.trees.tree import TokenTree
from harness.verify import DEFAULT_VERIFIER, VERIFIERS, Verifier
from harness.verify.sampling import SamplingConfig, next_token
from harness.verify.verdict import Verdict


def rows_drafting(adapter, count: int) -> RowsDrafting:
    """How ``count`` rows draft with ``adapter`` (one line for an adapter that cannot draft batch rows)."""
    if isinstance(adapter, NoDrafts):
        return RootOnlyRows()
    if type(adapter) is DraftLMAdapter:
        return DraftLMRows(adapter)
    if adapter.separate_root_forward:
        raise DraftcountError(f"{type(adapter).__name__} verifies its root in a forward of its own (unfused "
                              "verification), which batches do not run: fuse it to decode batches")
    together = adapter.batch_drafting(count)
    return together if together is not None else AdapterRows(adapter, count)


def prefill_rows(target: LoadedModel, rows: list[BatchRow], cache, drafting) -> SlotMask:
    """Every prompt through the target, the first token of each row drawn with its generator, the drafting
    started on the same prefill."""
    ids, valid, position_ids = left_padded([row.prompt for row in rows], target.device)
    mask = SlotMask(valid[:, :0])
    mask.extend(valid)
    out = run_model(target, ids, cache, position_ids, ForwardTally(),
                    attention_bias=mask.bias(causal(ids.shape[-1], target.device), 0, target.dtype),
                    logits_to_keep=0 if drafting.wants_hidden else 1, output_hidden_states=drafting.wants_hidden,
                    hidden_layers=drafting.hidden_layers)
    lengths = [row.prompt.shape[-1] for row in rows]
    charge_rows(target, rows, lambda counters: counters.target, lengths, lengths)
    for index, row in enumerate(rows):
        row.root = int(next_token(out.logits[index, -1], row.ctx.sampling, row.ctx.generator).item())
        row.produced.append(row.root)
        row.ctx.tokens[:] = [*row.prompt[0].tolist(), row.root]
        row.ctx.counters.record_prefill()
    drafting.prefill(rows, ids, valid, position_ids, out)
    return mask


def run_target_rows(target: LoadedModel, rows: list[BatchRow], trees: list[TokenTree], cache, mask: SlotMask,
                    drafting) -> tuple[LMOutput, int]:
    """The target over every row's tree, padded to one node count (B, n): its output and the cache slot of the
    trees' roots."""
    padded = pad_trees(trees, target.device)
    positions = torch.tensor([row.position for row in rows], device=target.device)[:, None] + padded.depths
    start = mask.extend(padded.real)
    out = run_model(target, padded.tokens, cache, positions, ForwardTally(),
                    attention_bias=mask.bias(padded.visible, start, target.dtype),
                    output_hidden_states=drafting.wants_hidden, hidden_layers=drafting.hidden_layers)
    keys = mask.valid.shape[-1]
    charge_rows(target, rows, lambda counters: counters.target, [tree.size for tree in trees], [keys] * len(rows))
    return out, start


def verify_rows(rows: list[BatchRow], trees: list[TokenTree], logits: torch.Tensor, start: int, verify: Verifier,
                mask: SlotMask) -> list[Verdict]:
    """Verify each row's tree with the shared verifier and its own generator; keep the accepted path's slots in
    the target's cache (the rest masked); the rows move on by what they accepted."""
    verdicts = []
    for index, (row, tree) in enumerate(zip(rows, trees)):
        with row.ctx.counters.phase("verify"):
            verdict = verify(tree, logits[index, :tree.size], row.ctx.sampling, row.ctx.generator)
        row.ctx.counters.record_step(tree, verdict)
        path = set(verdict.path)
        mask.valid[index, start:start + tree.size] = torch.tensor([node in path for node in range(tree.size)],
                                                             device=mask.valid.device)
        row.produced.extend(verdict.new_tokens)
        row.ctx.tokens.extend(verdict.new_tokens)
        row.position += len(verdict.path)
        row.root = int(verdict.new_tokens[-1])
        verdicts.append(verdict)
    return verdicts


def generate_batch(
    target: LoadedModel,
    adapter,
    prompts: list[torch.Tensor],
    max_new_tokens: int,
    sampling: SamplingConfig,
    generators: list[torch.Generator | None],
    eos_token_ids: frozenset[int] = frozenset(),
    verify: Verifier = VERIFIERS[DEFAULT_VERIFIER],
) -> list[Generation]:
    """Decode ``prompts`` (each (1, L_i)) as one static batch, ``adapter`` drafting for every row; one
    ``Generation`` per prompt, each with the law of ``generate`` on that prompt with that row's generator (equal
    tokens at T = 0). A row's ``wall_seconds`` is the time from the batch's start to its last token, its
    ``phase_seconds`` the time of the batch's verify forwards (``target``) and drafting (``drafter``) it was part
    of."""
    drafting = rows_drafting(adapter, len(prompts))
    why = eager_refusal(target.config)
    if why:  # a recurrent state reads every token fed, the masked ones too (padding, rejected drafts)
        raise DraftcountError(f"batches mask their padding and rejected drafts in the KV cache, which this target's "
                              f"recurrent state does not see: its {why}. Run it one request at a time")
    if len(generators) != len(prompts):
        raise DraftcountError(f"{len(prompts)} prompts need as many generators, got {len(generators)}")
    if max_new_tokens < 1:
        raise DraftcountError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    for index, prompt in enumerate(prompts):
        check_fits_context(target, prompt.shape[-1], max_new_tokens, adapter.max_draft_nodes, f"row {index}")
    rows = [BatchRow(StepContext(sampling, generator, GenerationCounters(), target.vocab_size,
                                 max_sequence=prompt.shape[-1] + max_new_tokens + 1),
                     prompt.to(target.device), prompt.shape[-1])
            for generator, prompt in zip(generators, prompts)]
    stopwatch = Stopwatch(target.device)
    with torch.inference_mode():
        cache = new_cache(target.config)
        mask = prefill_rows(target, rows, cache, drafting)
        prefill_seconds = stopwatch.elapsed()
        live = list(range(len(rows)))
        while True:
            still = [index for index in live if not finished(rows[index], max_new_tokens, eos_token_ids)]
            for index in set(live) - set(still):
                rows[index].finished_at = stopwatch.elapsed()
            if not still:
                break
            if len(still) < len(live):  # finished rows leave the batch with their cache rows
                keep = torch.tensor([live.index(index) for index in still])  # host: row indices, each user moves them
                cache.batch_select_indices(keep.to(target.device))
                mask.select(keep)
                drafting.select(keep)
                live = still
            batch = [rows[index] for index in live]
            drafted = Stopwatch(target.device)
            trees = drafting.draft(batch)
            charge_phase(batch, "drafter", drafted.elapsed())  # the batch's drafting, every live row waits for it
            forward = Stopwatch(target.device)
            out, start = run_target_rows(target, batch, trees, cache, mask, drafting)
            charge_phase(batch, "target", forward.elapsed())  # the batch's verify forward (the load bound)
            verdicts = verify_rows(batch, trees, out.logits, start, verify, mask)
            drafting.accepted(batch, trees, verdicts, out)
    return [finish_row(row, prefill_seconds, max_new_tokens, eos_token_ids) for row in rows]


def charge_phase(rows: list[BatchRow], phase: str, seconds: float) -> None:
    """Add one batched phase's seconds to every row that took part in it (``phase_seconds[phase]``)."""
    for row in rows:
        row.ctx.counters.phase_seconds[phase] = row.ctx.counters.phase_seconds.get(phase, 0.0) + seconds


def finished(row: BatchRow, max_new_tokens: int, eos_token_ids: frozenset[int]) -> bool:
    return len(row.produced) >= max_new_tokens or bool(eos_token_ids.intersection(row.produced))


def finish_row(row: BatchRow, prefill_seconds: float, max_new_tokens: int,
               eos_token_ids: frozenset[int]) -> Generation:
    counters = row.ctx.counters
    counters.prefill_seconds, counters.wall_seconds = prefill_seconds, row.finished_at
    output, counters.stop_reason = trim_output(row.produced, eos_token_ids, max_new_tokens)
    counters.new_tokens = len(output)
    return Generation(output_ids=output, counters=counters)
