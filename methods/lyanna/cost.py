"""Lyanna's cost model for the projection: a catch-up and one step per depth, each one backbone state whatever
the number of nodes (depth + 1 depth steps), each measured as one state, its LM-head logits and the token-info
logits of ``top_k`` nodes; and the adapter over a random drafter of the shape it times (``random_adapter``: the
engine-efficiency oracle's drafter)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from harness.backend.kv_cache import crop_cache
from harness.backend.models import LoadedModel
from harness.backend.timed import timed_seconds, timing_cache
from harness.engine.method_spec import CostModel, Latencies, option
from harness.training.draft_vocab import DraftVocab, sized_vocab
from methods.lyanna import LyannaOptions
from methods.lyanna.adapter import LyannaAdapter
from methods.lyanna.model import LyannaArch, LyannaModel, new_drafter

COMPONENT = "lyanna_depth"


@torch.no_grad()
def step_latency(target: PreTrainedModel, top_k: int, prefix: int, repeats: int, timing: str = "eager",
                 draft_vocab: int = 0) -> float:
    """One Lyanna depth: one backbone state, its LM-head logits, and the token-info logits of ``top_k`` nodes (over
    ``draft_vocab`` tokens; 0: the whole vocabulary)."""
    device = next(target.parameters()).device
    vocab = sized_vocab(int(target.get_output_embeddings().weight.shape[0]), draft_vocab)
    drafter = random_drafter(target, vocab).to(device, target.dtype).eval()
    hidden = target.config.hidden_size
    cache = timing_cache(drafter.config, prefix + 1, target.dtype, device, timing)
    drafter(torch.randn(1, prefix, hidden, device=device, dtype=target.dtype),
            torch.arange(prefix, device=device)[None], cache)
    state_input = torch.randn(1, 1, hidden, device=device, dtype=target.dtype)
    position = torch.full((1, 1), prefix, device=device)
    parents = torch.randint(drafter.full_vocab, (1, top_k), device=device)

    def depth() -> None:
        states = drafter(drafter.own_inputs(state_input), position, cache)
        logits = drafter.node_logits(states[:, -1:], parents, drafter.state_logits(states[:, -1:]))
        torch.log_softmax(logits.float(), dim=-1)
        crop_cache(cache, prefix)

    return timed_seconds(depth, device, repeats, timing)


def random_drafter(target: PreTrainedModel, vocab: DraftVocab | None = None) -> LyannaModel:
    """A fresh drafter of the default architecture (``LyannaArch()``) for ``target``, built on its device."""
    with torch.device(next(target.parameters()).device):
        return new_drafter(target, LyannaArch(), vocab, seed=0)


def random_adapter(options: LyannaOptions, target: LoadedModel) -> LyannaAdapter:
    """The `lyanna` adapter drafting as ``options`` say with a random drafter of the shape ``step_latency`` times."""
    return LyannaAdapter(random_drafter(target.model), target, options)


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    return (int(option(options, "depth", 5)) + 1) * latencies.step(COMPONENT)


COST = CostModel(drafting_seconds, step_latency, COMPONENT, random_adapter)
