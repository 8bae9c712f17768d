"""EAGLE's cost model for the projection: a catch-up forward on the accepted tokens, then one expansion of top-k
nodes per depth (depth + 1 head steps), each measured as one head step over ``top_k`` frontier nodes; and the adapter
over a random head of the shape it times (``random_adapter``: the engine-efficiency oracle's drafter)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import PreTrainedModel

from harness.backend.kv_cache import crop_cache
from harness.backend.models import LoadedModel
from harness.backend.timed import timed_seconds, timing_cache
from harness.engine.method_spec import CostModel, Latencies, option
from harness.training.draft_vocab import DraftVocab, sized_vocab
from harness.training.features import FeatureSpec
from methods.eagle import EagleOptions
from methods.eagle.adapter import EagleAdapter
from methods.eagle.head import new_head

COMPONENT = "eagle_step"


@torch.no_grad()
def step_latency(target: PreTrainedModel, top_k: int, prefix: int, repeats: int, timing: str = "eager",
                 draft_vocab: int = 0) -> float:
    """One EAGLE-2 expansion: the head on ``top_k`` frontier nodes (tree mask over its cache) + their logits (over
    ``draft_vocab`` tokens; 0: the whole vocabulary)."""
    vocab = sized_vocab(int(target.get_output_embeddings().weight.shape[0]), draft_vocab)
    return head_step_latency(random_head(target, vocab), target, top_k, prefix, repeats, timing)


def random_head(target: PreTrainedModel, vocab: DraftVocab | None = None) -> torch.nn.Module:
    """A fresh EAGLE-2 head (the last layer's features, no fusion) for ``target``, built on its device."""
    with torch.device(next(target.parameters()).device):
        return new_head(target, FeatureSpec("none", ("last",)), seed=0, draft_vocab=vocab)


def random_adapter(options: EagleOptions, target: LoadedModel) -> EagleAdapter:
    """The `eagle` adapter drafting ``options``' trees with a random head of the shape ``step_latency`` times."""
    return EagleAdapter(random_head(target.model), target, options.shape(), options.visual_tokens)


def head_step_latency(head: torch.nn.Module, target: PreTrainedModel, top_k: int, prefix: int, repeats: int,
                      timing: str = "eager") -> float:
    """One beam expansion of ``head`` (an EAGLE-style head: features, tokens, positions, cache, mask) on ``top_k``
    frontier nodes over a ``prefix`` in its cache, and their logits (``head_step``)."""
    device = next(target.parameters()).device
    return timed_seconds(head_step(head, target, top_k, prefix, timing), device, repeats, timing)


@torch.no_grad()
def head_step(head: torch.nn.Module, target: PreTrainedModel, top_k: int, prefix: int,
              timing: str = "eager") -> Callable[[], None]:
    """One beam expansion of ``head`` as a call: the head on ``top_k`` frontier nodes (a tree mask over a ``prefix``
    in its cache) and their log-probabilities over its draft vocabulary (through the target's LM head, or its own)."""
    device = next(target.parameters()).device
    lm_head = target.get_output_embeddings()
    vocab = int(lm_head.weight.shape[0])
    head = head.to(device, target.dtype).eval()
    hidden = target.config.hidden_size
    cache = timing_cache(head.config, prefix + top_k, target.dtype, device, timing)
    head(torch.randn(1, prefix, hidden, device=device, dtype=target.dtype),
         torch.randint(vocab, (1, prefix), device=device), torch.arange(prefix, device=device)[None], cache)
    features = torch.randn(1, top_k, hidden, device=device, dtype=target.dtype)
    tokens = torch.randint(vocab, (1, top_k), device=device)
    positions = torch.full((1, top_k), prefix, device=device)
    bias = torch.full((1, 1, top_k, prefix + top_k), torch.finfo(target.dtype).min, device=device, dtype=target.dtype)
    bias[..., :prefix] = 0
    bias[0, 0, torch.arange(top_k, device=device), prefix + torch.arange(top_k, device=device)] = 0

    @torch.no_grad()
    def step() -> None:
        states = head(features, tokens, positions, cache, bias)
        torch.log_softmax(head.logits(states, lm_head).float(), dim=-1)
        crop_cache(cache, prefix)

    return step


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    """depth + 1 head steps; P-EAGLE's (``parallel``: k) one, over its k slots (about a top-k step's tokens)."""
    if int(option(options, "parallel", 0)):
        return latencies.step(COMPONENT)
    return (int(option(options, "depth", 5)) + 1) * latencies.step(COMPONENT)


COST = CostModel(drafting_seconds, step_latency, COMPONENT, random_adapter)
