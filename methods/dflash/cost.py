"""DFlash's cost model for the projection: one drafter forward per step over the block (and the context rows the
last step accepted), measured at the target's shape with z-lab's released drafter shape (5 layers, block 16).
The step is timed eager whatever the timing asked (the drafter's cache is transformers' DynamicCache). ``random_adapter``:
the adapter over a random drafter of that shape (the engine-efficiency oracle's drafter)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from harness.backend.forward import positions
from harness.backend.kv_cache import crop_cache, new_cache
from harness.backend.models import LoadedModel
from harness.backend.timed import timed_seconds
from harness.engine.method_spec import CostModel, Latencies
from harness.training.draft_vocab import DraftVocab, sized_vocab
from methods.dflash import DFlashOptions
from methods.dflash.adapter import DFlashAdapter
from methods.dflash.checkpoint import new_drafter
from methods.dflash.model import DFlashDrafter, default_target_layers

COMPONENT = "dflash_step"
RELEASED_LAYERS, RELEASED_BLOCK = 5, 16  # z-lab's Qwen3-8B drafter
ACCEPTED_ROWS = 4  # context rows fed per step (about the tokens one step emits)


@torch.no_grad()
def step_latency(target: PreTrainedModel, top_k: int, prefix: int, repeats: int, timing: str = "eager",
                 draft_vocab: int = 0) -> float:
    """One block forward: ``ACCEPTED_ROWS`` new context rows and a block of ``RELEASED_BLOCK`` over a cached
    context of ``prefix`` positions, then the target's LM head on the drafting slots, over ``draft_vocab`` tokens
    (0: the whole vocabulary; ``top_k`` is unused: the block is drafted in one forward whatever the tree)."""
    device = next(target.parameters()).device
    lm_head = target.get_output_embeddings()
    vocab = sized_vocab(int(lm_head.weight.shape[0]), draft_vocab)
    drafter = released_drafter(target, vocab).to(device, target.dtype).eval()
    width = target.config.hidden_size
    cache = new_cache(drafter.config)
    drafter(torch.randn(1, prefix, width, device=device, dtype=target.dtype),
            torch.randn(1, 1, width, device=device, dtype=target.dtype), positions(0, prefix + 1, device), cache)
    crop_cache(cache, prefix)
    rows = [torch.randn(1, ACCEPTED_ROWS, width, device=device, dtype=target.dtype)] * len(drafter.target_layer_ids)
    block = torch.randn(1, RELEASED_BLOCK, width, device=device, dtype=target.dtype)
    position_ids = positions(prefix, ACCEPTED_ROWS + RELEASED_BLOCK, device)

    def step() -> None:
        hidden = drafter(drafter.context(rows), block, position_ids, cache)
        torch.log_softmax(drafter.logits(drafter.draft_rows(hidden), lm_head).float(), dim=-1)
        crop_cache(cache, prefix)

    return timed_seconds(step, device, repeats, "eager")


def released_drafter(target: PreTrainedModel, vocab: DraftVocab | None = None) -> DFlashDrafter:
    """A fresh drafter of z-lab's released shape (``RELEASED_LAYERS`` layers, block ``RELEASED_BLOCK``, their choice
    of target layers) for ``target``, built on its device."""
    total = int(target.config.num_hidden_layers)
    with torch.device(next(target.parameters()).device):
        return new_drafter(target, RELEASED_LAYERS, RELEASED_BLOCK, default_target_layers(total, RELEASED_LAYERS),
                           None, seed=0, draft_vocab=vocab)


def random_adapter(options: DFlashOptions, target: LoadedModel) -> DFlashAdapter:
    """The `dflash` adapter drafting as ``options`` say with a random drafter of the released shape."""
    return DFlashAdapter(released_drafter(target.model), target, options)


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    return latencies.step(COMPONENT)


COST = CostModel(drafting_seconds, step_latency, COMPONENT, random_adapter)
