"""Static-batch decoding: B prompts decoded together, each row lossless on its own (the load study's engine).

The rows share one target forward per step and one KV cache whose slots grow by the same count for every row;
what differs per row is which slots it may attend (``valid``: its prompt without the left padding, and the
accepted path of every step; a rejected draft's slot stays in the cache, masked) and its positions. So no row's
cache is ever compacted, rows never wait for each other's acceptance, and a finished row leaves the batch
(its cache rows are dropped). Per step: ``draft_rows`` (each row's tree over the draft LM's shape, one draft
forward per level for the whole batch) -> ``run_target_rows`` (the target over every row's tree) -> ``accept_rows``
(the shared verifier per row, with the row's own random generator, so a row's output has the law of a batch-1
generation).

Methods opt in through ``batch_drafter``: `ar` (no drafts) and a draft LM over a fixed tree shape (`sd`'s chain,
`tree_sd`'s tree); the others are refused with one line until they do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.backend.device import Stopwatch
from harness.backend.forward import ForwardTally, count_forward, run_model
from harness.backend.kv_cache import new_cache, rollback_refusal
from harness.backend.models import LoadedModel
from harness.engine.adapter import NoDrafts, StepContext
from harness.engine.counters import GenerationCounters
from harness.engine.draft_lm import DraftLMAdapter
from harness.engine.loop import Generation, check_fits_context, trim_output
from harness.errors import DraftcountError
from harness.trees.tree import TokenTree, ancestor_matrix, depths_of
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
    pending: int | None = None  # an accepted draft the draft LM never fed (a leaf of the shape)
    finished_at: float = 0.0  # seconds from the batch's start until the row's last token


@dataclass
class SlotMask:
    """Which cache slots each row attends: (B, S) bool, one column per slot, grown by every forward's new slots."""

    valid: torch.Tensor

    def bias(self, visible: torch.Tensor, block_start: int, dtype: torch.dtype) -> torch.Tensor:
        """The additive mask (B, 1, q, S) of a forward whose q queries are the last q slots: each query sees the
        row's valid slots before ``block_start`` and, of the block from there, the valid ones ``visible`` (q, W)
        allows it (its tree ancestors), and always itself (so a masked pad query still attends to something)."""
        rows = self.valid.shape[0]
        queries, width = visible.shape
        own = torch.zeros(queries, width, dtype=torch.bool, device=visible.device)
        own[torch.arange(queries), width - queries + torch.arange(queries)] = True
        block = (self.valid[:, None, block_start:] & visible[None]) | own[None]
        allowed = torch.cat([self.valid[:, None, :block_start].expand(rows, queries, block_start), block], dim=-1)
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min)[:, None]

    def extend(self, new_valid: torch.Tensor) -> int:
        """Append the new slots' validity (B, n); the index of the first of them."""
        start = self.valid.shape[-1]
        self.valid = torch.cat([self.valid, new_valid.to(self.valid.device)], dim=-1)
        return start

    def select(self, rows: torch.Tensor) -> None:
        self.valid = self.valid[rows.to(self.valid.device)]


@dataclass
class DraftedTrees:
    """Every row's tree of one step: the shared shape (parents), tokens (B, n), per node the rows' draft
    distributions, and the draft LM's slots of the step (pending, root, then ``fed``: the nodes fed after it)."""

    parents: tuple[int, ...]
    tokens: torch.Tensor
    probs: list[list[torch.Tensor | None]]
    fed: list[int]
    step_start: int = 0  # the draft cache's first slot of the step


def batch_drafter(adapter) -> DraftLMAdapter | None:
    """The adapter's batched drafting (None: `ar`, no drafts); one line for an adapter that has not opted in."""
    if isinstance(adapter, NoDrafts):
        return None
    if type(adapter) is DraftLMAdapter:
        return adapter
    raise DraftcountError(f"{type(adapter).__name__} decodes one request at a time: batch sizes > 1 run `ar`, "
                          "`sd` and `tree_sd` (a draft LM over a fixed tree shape) so far")


def left_padded(prompts: list[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The prompts (each (1, L_i)) left-padded to one length: ids (B, L), valid slots (B, L), positions (B, L)."""
    longest = max(prompt.shape[-1] for prompt in prompts)
    ids = torch.full((len(prompts), longest), PAD_TOKEN, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, longest - prompt.shape[-1]:] = prompt[0].cpu()
    pads = torch.tensor([longest - prompt.shape[-1] for prompt in prompts])
    slots = torch.arange(longest)
    return (ids.to(device), (slots[None] >= pads[:, None]).to(device),
            (slots[None] - pads[:, None]).clamp(min=0).to(device))


def charge_rows(lm: LoadedModel, rows: list[BatchRow], tally_of, tokens: list[int], keys: list[int]) -> None:
    """Each row's share of one batched forward: a forward of its real ``tokens`` over its ``keys`` slots, on the
    tally ``tally_of(row.ctx.counters)`` (padding is counted by the caller, not charged to a row)."""
    for row, count, total in zip(rows, tokens, keys):
        count_forward(lm, tally_of(row.ctx.counters), count, total - count, count)


def causal(count: int, device: torch.device) -> torch.Tensor:
    return torch.ones(count, count, dtype=torch.bool, device=device).tril()


def prefill_rows(target: LoadedModel, rows: list[BatchRow], prompts: list[torch.Tensor], cache,
                 drafter: DraftLMAdapter | None, draft_cache) -> tuple[SlotMask, SlotMask | None]:
    """Every prompt through the target (and the draft LM), the first token of each row drawn with its generator."""
    ids, valid, position_ids = left_padded(prompts, target.device)
    mask = SlotMask(valid[:, :0])
    mask.extend(valid)
    out = run_model(target, ids, cache, position_ids, ForwardTally(),
                    attention_bias=mask.bias(causal(ids.shape[-1], target.device), 0, target.dtype), logits_to_keep=1)
    lengths = [prompt.shape[-1] for prompt in prompts]
    charge_rows(target, rows, lambda counters: counters.target, lengths, lengths)
    for index, row in enumerate(rows):
        row.root = int(next_token(out.logits[index, -1], row.ctx.sampling, row.ctx.generator).item())
        row.produced.append(row.root)
        row.ctx.counters.record_prefill()
    if drafter is None:
        return mask, None
    device = drafter.draft.device
    draft_mask = SlotMask(valid[:, :0].to(device))
    draft_mask.extend(valid)
    run_model(drafter.draft, ids.to(device), draft_cache, position_ids.to(device), ForwardTally(),
              attention_bias=draft_mask.bias(causal(ids.shape[-1], device), 0, drafter.draft.dtype), logits_to_keep=1)
    charge_rows(drafter.draft, rows, lambda counters: counters.drafter, lengths, lengths)
    return mask, draft_mask


def draft_rows(drafter: DraftLMAdapter, rows: list[BatchRow], draft_cache, draft_mask: SlotMask) -> DraftedTrees:
    """Every row's tree over the drafter's shape, grown level by level as ``DraftLMAdapter.propose`` grows it (the
    same nodes in the same order): the first forward feeds each row's pending token (or a masked pad) and root,
    each later one the level's nodes that have children, every row at once."""
    lm, device = drafter.draft, drafter.draft.device
    has_pending = torch.tensor([row.pending is not None for row in rows], device=device)
    inputs = torch.tensor([[PAD_TOKEN if row.pending is None else row.pending, row.root] for row in rows],
                          device=device)
    base = torch.tensor([row.position for row in rows], device=device)
    step_start = draft_mask.extend(torch.stack([has_pending, torch.ones_like(has_pending)], dim=-1))
    visible = torch.tensor([[True, False], [True, True]], device=device)
    positions = torch.stack([(base - 1).clamp(min=0), base], dim=-1)
    roots = torch.tensor([row.root for row in rows])
    tokens, parents, probs = [roots], [-1], [[None] * len(rows)]
    node_logits: dict[int, torch.Tensor] = {}
    frontier, fed, query_nodes = [(0, 0)], [], [0]
    for depth in range(1, drafter.depth + 1):
        keys = draft_mask.valid.shape[-1]
        out = run_model(lm, inputs, draft_cache, positions, ForwardTally(),
                        attention_bias=draft_mask.bias(visible, step_start, lm.dtype))
        charge_rows(lm, rows, lambda counters: counters.drafter, [inputs.shape[-1]] * len(rows), [keys] * len(rows))
        width = out.logits.shape[1]
        node_logits.update({node: out.logits[:, width - len(query_nodes) + index]
                            for index, node in enumerate(query_nodes)})
        level = []
        for shape_node, tree_node in frontier:
            kids = drafter.shape_children[shape_node]
            if not kids:
                continue
            chosen = [drafter.chooser(node_logits[tree_node][index], len(kids), row.ctx, drafter.replacement)
                      for index, row in enumerate(rows)]
            for rank, kid in enumerate(kids):
                tokens.append(torch.stack([choice[rank][0].cpu() for choice in chosen]))
                parents.append(tree_node)
                probs.append([choice[rank][1] for choice in chosen])
                level.append((kid, len(tokens) - 1))
        frontier = level
        query_nodes = [tree_node for shape_node, tree_node in level if drafter.shape_children[shape_node]]
        if not query_nodes or depth == drafter.depth:
            break
        fed_before = list(fed)
        fed.extend(query_nodes)
        draft_mask.extend(torch.ones(len(rows), len(query_nodes), dtype=torch.bool))
        ancestors = ancestor_matrix(tuple(parents)).to(device)
        step_nodes = [0, *fed_before, *query_nodes]
        visible = torch.cat([torch.ones(len(query_nodes), 1, dtype=torch.bool, device=device),  # the pending slot
                             ancestors[query_nodes][:, step_nodes]], dim=-1)
        inputs = torch.stack([tokens[node] for node in query_nodes], dim=-1).to(device)
        positions = (base + depth)[:, None].expand(-1, len(query_nodes))
    return DraftedTrees(tuple(parents), torch.stack(tokens, dim=-1), probs, fed, step_start)


def run_target_rows(target: LoadedModel, rows: list[BatchRow], trees: DraftedTrees, cache,
                    mask: SlotMask) -> tuple[torch.Tensor, int]:
    """The target over every row's tree (B, n): its logits (B, n, V) and the cache slot of the trees' root."""
    device = target.device
    count = len(trees.parents)
    depths = torch.tensor(depths_of(trees.parents), device=device)
    positions = torch.tensor([row.position for row in rows], device=device)[:, None] + depths[None]
    start = mask.extend(torch.ones(len(rows), count, dtype=torch.bool))
    bias = mask.bias(ancestor_matrix(trees.parents).to(device), start, target.dtype)
    out = run_model(target, trees.tokens.to(device), cache, positions, ForwardTally(), attention_bias=bias)
    keys = mask.valid.shape[-1]
    charge_rows(target, rows, lambda counters: counters.target, [count] * len(rows), [keys] * len(rows))
    return out.logits, start


def accept_rows(rows: list[BatchRow], trees: DraftedTrees, logits: torch.Tensor, start: int, verify: Verifier,
                mask: SlotMask, draft_mask: SlotMask | None) -> None:
    """Verify each row's tree with the shared verifier and its own generator; keep the accepted path's slots in
    the target's cache and the draft LM's (an accepted node the draft LM never fed waits as the row's pending)."""
    count = len(trees.parents)
    for index, row in enumerate(rows):
        tree = TokenTree(trees.tokens[index].to(logits.device), trees.parents,
                         [trees.probs[node][index] for node in range(count)])
        with row.ctx.counters.phase("verify"):
            verdict = verify(tree, logits[index], row.ctx.sampling, row.ctx.generator)
        row.ctx.counters.record_step(tree, verdict)
        path = set(verdict.path)
        mask.valid[index, start:start + count] = torch.tensor([node in path for node in range(count)])
        if draft_mask is not None:
            first = trees.step_start + 2
            draft_mask.valid[index, first:first + len(trees.fed)] = torch.tensor([node in path for node in trees.fed])
        last = verdict.path[-1]
        row.pending = int(trees.tokens[index, last]) if last != 0 and last not in trees.fed else None
        row.produced.extend(verdict.new_tokens)
        row.position += len(verdict.path)
        row.root = int(verdict.new_tokens[-1])


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
    ``phase_seconds["target"]`` the time of the verify forwards it was part of."""
    drafter = batch_drafter(adapter)
    why = rollback_refusal(target.config)
    if why:  # a recurrent state reads every token fed, the masked ones too (padding, rejected drafts)
        raise DraftcountError(f"batches mask their padding and rejected drafts in the KV cache, which this target's "
                              f"recurrent state does not see: its {why}. Run it one request at a time")
    if len(generators) != len(prompts):
        raise DraftcountError(f"{len(prompts)} prompts need as many generators, got {len(generators)}")
    if max_new_tokens < 1:
        raise DraftcountError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    for index, prompt in enumerate(prompts):
        check_fits_context(target, prompt.shape[-1], max_new_tokens, adapter.max_draft_nodes, f"row {index}")
    rows = [BatchRow(StepContext(sampling, generator, GenerationCounters(), target.vocab_size), prompt.shape[-1], 0)
            for generator, prompt in zip(generators, prompts)]
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
            if drafter is None or not drafter.shape_children[0]:
                trees = DraftedTrees((-1,), torch.tensor([[row.root] for row in batch]), [[None] * len(batch)], [])
            else:
                trees = draft_rows(drafter, batch, draft_cache, draft_mask)
            forward = Stopwatch(target.device)
            logits, start = run_target_rows(target, batch, trees, cache, mask)
            seconds = forward.elapsed()  # the batch's verify forward, charged to every live row (the load bound)
            for row in batch:
                row.ctx.counters.phase_seconds["target"] = row.ctx.counters.phase_seconds.get("target", 0.0) + seconds
            accept_rows(batch, trees, logits, start, verify, mask, draft_mask)
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
