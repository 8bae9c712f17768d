"""Per-rank acceptance, one of the two measurements a static (Sequoia) tree is chosen from (the other is
the forward latency per tree size, ``harness.measure.calibrations.latency``).

Per-rank acceptance runs the real drafting and verification of one level of
siblings at every position of held-out text (the target's and the draft's
distributions at the same prefix), so the probabilities follow exactly the
procedure a run uses: top-k children when greedy, samples with or without
replacement otherwise.
"""

from __future__ import annotations

import torch

from harness.engine.adapter import StepContext
from harness.engine.counters import GenerationCounters
from harness.engine.drafting import ChildChooser
from harness.backend.models import LoadedModel
from harness.verify.sampling import SamplingConfig
from harness.trees.tree import TokenTree
from harness.verify.token_level import verify_tree


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


