"""Static-batch decoding: B prompts decoded together, each row lossless on its own (the load study's engine).

The rows share one target forward per step and one KV cache whose slots grow by the same count for every row;
what differs per row is which slots it may attend (``valid``: its prompt without the left padding, and the
accepted path of every step; a rejected draft's slot stays in the cache, masked) and its positions. So no row's
cache is ever compacted, rows never wait for each other's acceptance, and a finished row leaves the batch
(its cache rows are dropped). Per step: ``draft_rows`` (each row's chain, one draft forward per depth for the
whole batch) -> ``run_target_rows`` (the target over every row's root and drafts) -> ``accept_rows`` (the shared
verifier per row, with the row's own random generator, so a row's output has the law of a batch-1 generation).

Methods opt in through ``batch_drafter``: `ar` (no drafts) and a draft LM over a chain (`sd`); the others are
refused with one line until they do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.backend.device import Stopwatch
from harness.backend.forward import ForwardTally, run_model
from harness.backend.kv_cache import new_cache
from harness.backend.models import LoadedModel
from harness.engine.adapter import NoDrafts, StepContext
from harness.engine.counters import GenerationCounters
from harness.engine.draft_lm import DraftLMAdapter
from harness.engine.drafting import choose_children
from harness.engine.loop import Generation, check_fits_context, trim_output
from harness.errors import DraftcountError
from harness.trees.tree import TokenTree
from harness.verify import DEFAULT_VERIFIER, VERIFIERS, Verifier
from harness.verify.sampling import SamplingConfig, next_token

PAD_TOKEN = 0  # what fills a masked slot (never attended, so any token id)


@dataclass
class BatchRow:
    """One request of the batch: its sampling context (generator, counters), where it stands, what it emitted."""

    ctx: StepContext
    position: int  # the root's position (unpadded): the next slot the row's sequence fills
    root: int  # the newest token, emitted, not yet in the target's cache
    produced: list[int] = field(default_factory=list)
    pending: int | None = None  # a draft the target accepted but the draft LM never fed (a fully accepted chain)
    finished_at: float = 0.0  # seconds from the batch's start until the row's last token


@dataclass
class SlotMask:
    """Which cache slots each row attends: (B, S) bool, grown by every forward's new slots."""

    valid: torch.Tensor

    def bias(self, new_valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The additive mask (B, 1, n, S + n) of a forward adding n slots per row: each query sees the row's
        valid past slots and the valid new ones up to itself (a chain), and always itself (no empty row)."""
        rows, count = new_valid.shape
        causal = torch.ones(count, count, dtype=torch.bool, device=new_valid.device).tril()
        own = torch.eye(count, dtype=torch.bool, device=new_valid.device)
        new = (causal[None] & new_valid[:, None, :]) | own[None]
        allowed = torch.cat([self.valid[:, None, :].expand(rows, count, -1), new], dim=-1)
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min)[:, None]

    def extend(self, new_valid: torch.Tensor) -> None:
        self.valid = torch.cat([self.valid, new_valid], dim=-1)

    def select(self, rows: torch.Tensor) -> None:
        self.valid = self.valid[rows]


def batch_drafter(adapter) -> DraftLMAdapter | None:
    """The adapter's batched drafting (None: `ar`, no drafts); one line for an adapter that has not opted in."""
    if isinstance(adapter, NoDrafts):
        return None
    if isinstance(adapter, DraftLMAdapter) and adapter.shape == tuple(range(-1, len(adapter.shape) - 1)):
        return adapter
    raise DraftcountError(f"{type(adapter).__name__} decodes one request at a time: batch sizes > 1 run `ar` and "
                          "`sd` (a draft LM over a chain) so far")


def left_padded(prompts: list[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The prompts (each (1, L_i)) left-padded to one length: ids (B, L), valid slots (B, L), positions (B, L)."""
    longest = max(prompt.shape[-1] for prompt in prompts)
    ids = torch.full((len(prompts), longest), PAD_TOKEN, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, longest - prompt.shape[-1]:] = prompt[0]
    pads = torch.tensor([longest - prompt.shape[-1] for prompt in prompts])
    slots = torch.arange(longest)
    return (ids.to(device), (slots[None] >= pads[:, None]).to(device),
            (slots[None] - pads[:, None]).clamp(min=0).to(device))


def charge_rows(lm: LoadedModel, rows: list[BatchRow], tally_of, tokens: list[int], keys: list[int]) -> None:
    """Each row's share of one batched forward: a forward of its real ``tokens`` over its ``keys`` slots, on the
    tally ``tally_of(row.ctx.counters)`` (padding is counted by the caller, not charged to a row)."""
    for row, count, total in zip(rows, tokens, keys):
        tally: ForwardTally = tally_of(row.ctx.counters)
        tally.add(count, lm.cost.forward_flops(count, total, count))


def prefill_rows(target: LoadedModel, rows: list[BatchRow], prompts: list[torch.Tensor], cache,
                 drafter: DraftLMAdapter | None, draft_cache) -> tuple[SlotMask, SlotMask | None]:
    """Every prompt through the target (and the draft LM), the first token of each row drawn with its generator."""
    ids, valid, position_ids = left_padded(prompts, target.device)
    mask = SlotMask(valid[:, :0])
    out = run_model(target, ids, cache, position_ids, ForwardTally(), attention_bias=mask.bias(valid, target.dtype),
                    logits_to_keep=1)
    mask.extend(valid)
    lengths = [prompt.shape[-1] for prompt in prompts]
    charge_rows(target, rows, lambda counters: counters.target, lengths, lengths)
    for index, row in enumerate(rows):
        row.root = int(next_token(out.logits[index, -1], row.ctx.sampling, row.ctx.generator).item())
        row.produced.append(row.root)
        row.ctx.counters.record_prefill()
    if drafter is None:
        return mask, None
    draft_mask = SlotMask(valid[:, :0])
    draft_ids = ids.to(drafter.draft.device)
    run_model(drafter.draft, draft_ids, draft_cache, position_ids.to(drafter.draft.device), ForwardTally(),
              attention_bias=draft_mask.bias(valid.to(drafter.draft.device), drafter.draft.dtype), logits_to_keep=1)
    draft_mask.extend(valid.to(drafter.draft.device))
    charge_rows(drafter.draft, rows, lambda counters: counters.drafter, lengths, lengths)
    return mask, draft_mask


def draft_rows(drafter: DraftLMAdapter, rows: list[BatchRow], draft_cache,
               draft_mask: SlotMask) -> tuple[torch.Tensor, list[list[torch.Tensor | None]]]:
    """Each row's chain of ``drafter.depth`` draft tokens (B, k) and the distributions they came from: the first
    forward feeds a row's pending token (or a masked pad) and its root, each later one the previous draft."""
    lm, device = drafter.draft, drafter.draft.device
    has_pending = torch.tensor([row.pending is not None for row in rows], device=device)
    inputs = torch.tensor([[PAD_TOKEN if row.pending is None else row.pending, row.root] for row in rows],
                          device=device)
    positions = torch.tensor([[max(row.position - 1, 0), row.position] for row in rows], device=device)
    new_valid = torch.stack([has_pending, torch.ones_like(has_pending)], dim=-1)
    drafts: list[torch.Tensor] = []
    probs: list[list[torch.Tensor | None]] = [[] for _ in rows]
    for depth in range(drafter.depth):
        keys = draft_mask.valid.shape[-1] + inputs.shape[-1]
        out = run_model(lm, inputs, draft_cache, positions, ForwardTally(),
                        attention_bias=draft_mask.bias(new_valid, lm.dtype), logits_to_keep=1)
        draft_mask.extend(new_valid)
        charge_rows(lm, rows, lambda counters: counters.drafter,
                    [int(count) for count in new_valid.sum(dim=-1).tolist()], [keys] * len(rows))
        chosen = []
        for index, row in enumerate(rows):
            token, q = choose_children(out.logits[index, -1], 1, row.ctx, drafter.replacement)[0]
            chosen.append(token)
            probs[index].append(q)
        drafts.append(torch.stack(chosen))
        inputs = drafts[-1][:, None].to(device)
        positions = torch.tensor([[row.position + depth + 1] for row in rows], device=device)
        new_valid = torch.ones(len(rows), 1, dtype=torch.bool, device=device)
    return torch.stack(drafts, dim=-1), probs


def run_target_rows(target: LoadedModel, rows: list[BatchRow], drafts: torch.Tensor, cache,
                    mask: SlotMask) -> torch.Tensor:
    """The target over every row's root and drafts (B, k + 1): their logits (B, k + 1, V)."""
    device = target.device
    roots = torch.tensor([[row.root] for row in rows], device=device)
    tokens = torch.cat([roots, drafts.to(device)], dim=-1)
    count = tokens.shape[-1]
    positions = torch.tensor([[row.position + offset for offset in range(count)] for row in rows], device=device)
    new_valid = torch.ones(len(rows), count, dtype=torch.bool, device=device)
    keys = mask.valid.shape[-1] + count
    out = run_model(target, tokens, cache, positions, ForwardTally(), attention_bias=mask.bias(new_valid, target.dtype))
    mask.extend(new_valid)  # accept_rows masks the rejected ones
    charge_rows(target, rows, lambda counters: counters.target, [count] * len(rows), [keys] * len(rows))
    return out.logits


def accept_rows(rows: list[BatchRow], drafts: torch.Tensor, probs: list[list[torch.Tensor | None]],
                logits: torch.Tensor, verify: Verifier, mask: SlotMask, draft_mask: SlotMask | None) -> None:
    """Verify each row's chain with the shared verifier and its own generator; keep the accepted slots."""
    count = drafts.shape[-1] + 1
    kept = torch.zeros(len(rows), count, dtype=torch.bool)
    draft_kept = torch.zeros(len(rows), max(count - 1, 0), dtype=torch.bool)
    for index, row in enumerate(rows):
        tokens = torch.cat([torch.tensor([row.root]), drafts[index].cpu()]) if count > 1 else torch.tensor([row.root])
        tree = TokenTree(tokens.to(logits.device), tuple(range(-1, count - 1)), [None, *probs[index]])
        with row.ctx.counters.phase("verify"):
            verdict = verify(tree, logits[index], row.ctx.sampling, row.ctx.generator)
        row.ctx.counters.record_step(tree, verdict)
        accepted = len(verdict.path) - 1
        kept[index, : accepted + 1] = True
        # the draft LM fed the root and the first k - 1 drafts: it keeps those accepted; an accepted last draft waits
        draft_kept[index, : min(accepted, count - 2)] = True
        row.pending = int(tokens[-1]) if count > 1 and accepted == count - 1 else None
        row.produced.extend(verdict.new_tokens)
        row.position += accepted + 1
        row.root = int(verdict.new_tokens[-1])
    mask.valid[:, -count:] = kept.to(mask.valid.device)
    if draft_mask is not None and count > 2:
        draft_mask.valid[:, -(count - 2):] = draft_kept[:, : count - 2].to(draft_mask.valid.device)


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
    tokens at T = 0). A row's ``wall_seconds`` is the time from the batch's start to its last token."""
    drafter = batch_drafter(adapter)
    if len(generators) != len(prompts):
        raise DraftcountError(f"{len(prompts)} prompts need as many generators, got {len(generators)}")
    if max_new_tokens < 1:
        raise DraftcountError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    for index, prompt in enumerate(prompts):
        check_fits_context(target, prompt.shape[-1], max_new_tokens, adapter.max_draft_nodes, f"row {index}")
    rows = [BatchRow(StepContext(sampling, generator, GenerationCounters(), target.vocab_size), 0, 0)
            for generator in generators]
    for row, prompt in zip(rows, prompts):
        row.position = prompt.shape[-1]
    stopwatch = Stopwatch(target.device)
    with torch.inference_mode():
        cache = new_cache(target.config)
        draft_cache = None if drafter is None else new_cache(drafter.draft.config)
        mask, draft_mask = prefill_rows(target, rows, prompts, cache, drafter, draft_cache)
        prefill_seconds = stopwatch.elapsed()
        live = list(range(len(rows)))
        while True:
            still = [index for index in live if not finished(rows[index], max_new_tokens, eos_token_ids)]
            for index in set(live) - set(still):
                rows[index].finished_at = stopwatch.elapsed()
            if not still:
                break
            if len(still) < len(live):  # finished rows leave the batch with their cache rows
                keep = torch.tensor([live.index(index) for index in still])
                cache.batch_select_indices(keep.to(target.device))
                mask.select(keep.to(mask.valid.device))
                if drafter is not None:
                    draft_cache.batch_select_indices(keep.to(drafter.draft.device))
                    draft_mask.select(keep.to(draft_mask.valid.device))
                live = still
            batch = [rows[index] for index in live]
            if drafter is None:
                drafts, probs = torch.zeros(len(batch), 0, dtype=torch.long), [[] for _ in batch]
            else:
                drafts, probs = draft_rows(drafter, batch, draft_cache, draft_mask)
            logits = run_target_rows(target, batch, drafts, cache, mask)
            accept_rows(batch, drafts, probs, logits, verify, mask, draft_mask)
    return [finish_row(row, prefill_seconds, max_new_tokens, eos_token_ids) for row in rows]


def finished(row: BatchRow, max_new_tokens: int, eos_token_ids: frozenset[int]) -> bool:
    return len(row.produced) >= max_new_tokens or bool(eos_token_ids.intersection(row.produced))


def finish_row(row: BatchRow, prefill_seconds: float, max_new_tokens: int,
               eos_token_ids: frozenset[int]) -> Generation:
    counters = row.ctx.counters
    counters.prefill_seconds, counters.wall_seconds = prefill_seconds, row.finished_at
    output, counters.stop_reason = trim_output(row.produced, eos_token_ids, max_new_tokens)
    counters.new_tokens = len(output)
    return Generation(output_ids=output, counters=counters)
