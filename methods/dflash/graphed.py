"""`dflash`'s (and `dspark`'s) draft as one CUDA graph per shape: the drafter's forward over the new context rows
and the block, the LM head on the drafting slots and what the adapter makes of them on the device (the chain's
argmax, the beam tree's bookkeeping, DSpark's slot-by-slot Markov head and confidences), in one
``GraphedForwards.run_block``.

The block's shape is fixed by the number of context rows the step feeds (the positions accepted last step: 1 to
block + 1, one graph each) and by what the adapter returns (``outputs_kind``); what changes from step to step reaches
it as device inputs (the context rows, the root token, the drafter cache's length ``past``). The forward writes the
rows' and the block's keys at slots past..past + count + B - 1, the block's queries seeing every context key and the
whole block (no causal mask); the cache's length is then past + count, so the block's keys are overwritten next
step, as the eager path crops them. On the CPU (``capture=False``) the same body runs eagerly and
``harness.measure.diagnostics.dispatch`` books it as inside a graph.

The host's FLOP booking (``charge_block``) follows from the shape and runs outside the block. A chain sampled at
T > 0 (the ``sampled`` convention, DSpark's slots) is drawn inside the block from ``StepContext.graph_generator``
(the run's generator on the CPU, so the same tokens as the eager draft; a GPU's graph generator, registered with the
graph at capture). Left on the eager path: a prompt's first forward (an empty drafter cache).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from harness.backend.cuda_graphs import device_full_width_mask, writing_at
from harness.backend.static_cache import static_layers
from harness.engine.adapter import StepContext

if TYPE_CHECKING:
    from methods.dflash.adapter import DFlashAdapter


def graphs_draft(adapter: DFlashAdapter) -> bool:
    """Whether this step's draft runs as one graphed block: a graph runner and a static cache, a non-empty drafter
    cache (the runner's rule, ``graphs_forward``), and room in the cache for the context rows and the block."""
    graphs, layers = adapter.graphs, static_layers(adapter.cache)
    if graphs is None or layers is None:
        return False
    count = adapter.pending[0].shape[0]
    return graphs.graphs_forward(adapter.fed_len, count) and draft_length(adapter, count) <= layers[0].capacity


def draft_length(adapter: DFlashAdapter, count: int) -> int:
    """The cache slots the block writes: the prefix, ``count`` context rows and the block."""
    return adapter.fed_len + count + adapter.block_size


def graphed_outputs(adapter: DFlashAdapter, ctx: StepContext, root: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The drafter's forward and ``adapter.step_outputs`` as one graphed block (``graphs_draft`` must hold); the
    forward charged as the eager ``draft_block`` charges it."""
    count = adapter.pending[0].shape[0]
    inputs = {"rows": torch.cat(adapter.pending, dim=-1), "root": root}
    past = adapter.fed_len
    generator = ctx.graph_generator()  # a sampled chain's draws, inside the block

    def body(buffers: dict[str, torch.Tensor], start: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return adapter.step_outputs(ctx, buffers["root"], _forward(adapter, buffers, start, count), generator)

    with ctx.counters.phase("drafter"):  # the cache then keeps the context rows: the block's keys go
        outputs = adapter.graphs.run_block(("dflash", adapter.outputs_kind(ctx), count), adapter.cache, past,
                                           past + count, inputs, body, generator=generator)
    adapter.charge_block(ctx, count)
    return outputs


def _forward(adapter: DFlashAdapter, buffers: dict[str, torch.Tensor], past: torch.Tensor,
             count: int) -> torch.Tensor:
    """The block's forward: ``count`` context rows (their target states, concatenated) and the block [root, MASK x
    (B - 1)] at slots and positions past.., under a mask computed on the device; (drafts, width) outputs of the
    drafting slots."""
    drafter, cache, device = adapter.drafter, adapter.cache, adapter.device
    layers = static_layers(cache)
    block = adapter.block_size
    slots = past + torch.arange(count + block, device=device)
    keys = torch.arange(layers[0].capacity, device=device)
    # the block's queries see the cached prefix and the context rows (before them), and the whole block
    visible = torch.zeros((block, block), dtype=adapter.dtype, device=device)
    mask = device_full_width_mask(past + count, visible, keys, block)
    context = drafter.context([buffers["rows"]])[None]
    with writing_at(layers, slots):
        hidden = drafter(context, adapter.block_input(buffers["root"])[None], slots[None], cache, mask)
    return drafter.draft_rows(hidden[0])
