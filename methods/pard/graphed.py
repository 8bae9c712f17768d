"""`pard`'s draft as one CUDA graph per shape: the drafter's forward over the unseen accepted tokens and ``k - 1``
mask tokens, and the chain drawn from its k rows (``harness.engine.drafting.chain_choices``: the argmax, or at
T > 0 a sample carrying its q), in one ``GraphedForwards.run_block``.

The block's shape is fixed by the number of unseen tokens (1 to k + 1: one graph each), k, the drafting convention
and the sampling settings; what changes from step to step reaches it as device inputs (the unseen tokens, the cache's
length ``past``). The forward writes the masks' keys after the text's; the cache's length is then the text's, so
they are overwritten next step, as the eager path crops them. Sampled drafts are drawn inside the block from
``StepContext.graph_generator`` (the run's generator on the CPU, in the eager draft's order: the same tokens). On the
CPU (``capture=False``) the same body runs eagerly and ``harness.measure.diagnostics.dispatch`` books it as inside a
graph. Left on the eager path: a prompt's first forward (an empty drafter cache).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from harness.backend.forward import count_forward, static_block_logits
from harness.backend.static_cache import static_layers
from harness.engine.adapter import StepContext
from harness.engine.drafting import chain_choices

if TYPE_CHECKING:
    from methods.pard.adapter import PardAdapter


def graphs_draft(adapter: PardAdapter, count: int) -> bool:
    """Whether this step's draft (``count`` unseen tokens) runs as one graphed block: a graph runner and a static
    cache, a non-empty drafter cache (the runner's rule, ``graphs_forward``), and room for the text and the masks."""
    graphs, layers = adapter.graphs, static_layers(adapter.cache)
    if graphs is None or layers is None:
        return False
    width = count + adapter.k - 1
    return graphs.graphs_forward(adapter.cached_len, width) and adapter.cached_len + width <= layers[0].capacity


def sampled(adapter: PardAdapter, ctx: StepContext) -> bool:
    """Whether the chain's drafts carry a q (drawn, not the argmax)."""
    return adapter.drafts == "sampled" and not ctx.sampling.is_greedy


def graphed_chain(adapter: PardAdapter, ctx: StepContext,
                  unseen: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor | None], float]:
    """The chain's tokens (k + 1,), their q's (None: deterministic) and the forward's FLOPs, from one graphed block
    (``graphs_draft`` must hold); the forward counted as the eager one is."""
    lm, count, k = adapter.drafter, unseen.shape[0], adapter.k
    width = count + k - 1
    drawn = sampled(adapter, ctx)
    generator = ctx.graph_generator() if drawn else None
    step = replace(ctx, generator=generator) if drawn else ctx
    settings = (ctx.sampling.temperature, ctx.sampling.top_k, ctx.sampling.top_p) if drawn else ()

    def body(buffers: dict[str, torch.Tensor], start: torch.Tensor) -> tuple[torch.Tensor, ...]:
        text = buffers["unseen"]
        ids = torch.cat([text, torch.full((k - 1,), adapter.mask_token, dtype=text.dtype, device=lm.device)])
        logits = static_block_logits(lm, adapter.cache, ids, start, k)
        tokens, probs = chain_choices(text[-1], logits[0], step, adapter.drafts)
        return (torch.stack(tokens), torch.stack(probs[1:])) if drawn else (torch.stack(tokens),)

    past = adapter.cached_len
    with ctx.counters.phase("drafter"):  # the cache then holds the text: the masks' keys go
        outputs = adapter.graphs.run_block(("pard", count, k, adapter.mask_token, adapter.drafts, ctx.target_vocab_size,
                                            settings), adapter.cache, past,
                                           past + count, {"unseen": unseen}, body, generator=generator)
    flops = count_forward(lm, ctx.counters.drafter, width, past, min(k, width))
    tokens = outputs[0]
    return tokens, [None, *outputs[1].unbind()] if drawn else [None] * (k + 1), flops
