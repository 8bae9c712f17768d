"""Measurements a static tree is chosen from: per-rank acceptance and forward latencies.

Per-rank acceptance runs the real drafting and verification of one level of
siblings at every position of held-out text (the target's and the draft's
distributions at the same prefix), so the probabilities follow exactly the
procedure a run uses: top-k children when greedy, samples with or without
replacement otherwise.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

from harness.adapter import StepContext
from harness.counters import GenerationCounters
from harness.drafting import ChildChooser
from harness.forward import ForwardTally, positions, run_model
from harness.kv_cache import crop_cache, new_cache
from harness.models import LoadedModel
from harness.sampling import SamplingConfig
from harness.timing import synchronize
from harness.tree import TokenTree
from harness.verify import verify_tree


@torch.no_grad()
def rank_acceptance(target: LoadedModel, draft: LoadedModel, windows: torch.Tensor, sampling: SamplingConfig,
                    max_rank: int, chooser: ChildChooser, replacement: bool, seed: int = 0) -> list[float]:
    """P(the k-th child is the one accepted), k = 0..max_rank-1, over every position of ``windows`` (B, T)."""
    generator = torch.Generator(device=target.device).manual_seed(seed)
    ctx = StepContext(sampling, generator, GenerationCounters(), target.vocab_size)
    hits = [0] * max_rank
    total = 0
    for row in windows:
        row = row[None].to(target.device)
        target_logits = target.model(input_ids=row).logits[0]
        draft_logits = draft.model(input_ids=row.to(draft.device)).logits[0].to(target.device)
        for position in range(row.shape[1]):
            children = chooser(draft_logits[position], max_rank, ctx, replacement)
            tree = TokenTree(
                tokens=torch.stack([row[0, position]] + [token.to(row.device) for token, _ in children]),
                parents=(-1,) + (0,) * len(children),
                draft_probs=[None] + [q for _, q in children],
            )
            verdict = verify_tree(tree, target_logits[position].expand(tree.size, -1), sampling, generator)
            if verdict.num_accepted:
                hits[verdict.path[1] - 1] += 1
            total += 1
    return [count / total for count in hits]


def _median_seconds(run: Callable[[], None], device: torch.device, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


@torch.no_grad()
def forward_latency(lm: LoadedModel, sizes: Sequence[int], prefix_len: int, repeats: int = 5) -> dict[int, float]:
    """Median seconds of one forward over n tree tokens (a star: root plus n-1 children) after a cached prefix."""
    cache = new_cache(lm.config)
    prefix = torch.randint(0, lm.vocab_size, (1, prefix_len), generator=torch.Generator().manual_seed(0))
    run_model(lm, prefix.to(lm.device), cache, positions(0, prefix_len, lm.device), ForwardTally())
    latencies = {}
    for size in sizes:
        tree = TokenTree(torch.zeros(size, dtype=torch.long, device=lm.device), (-1,) + (0,) * (size - 1))
        bias = tree.attention_bias(lm.dtype)

        def step() -> None:
            run_model(lm, tree.tokens[None], cache, tree.position_ids(prefix_len), ForwardTally(), attention_bias=bias)
            crop_cache(cache, prefix_len)

        step()  # warm-up
        latencies[size] = _median_seconds(step, lm.device, repeats)
    return latencies
