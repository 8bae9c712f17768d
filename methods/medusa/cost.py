"""Medusa's cost model for the projection: one head evaluation per draft depth, each measured as head 1 over
``top_k`` rows with their LM-head logits (a Hydra head's block is wider, a Medusa head's runs on one row: both
within the LM head's cost, which dominates). Nothing grows with the context (the heads never see it)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from harness.backend.timed import timed_seconds
from harness.engine.method_spec import CostModel, Latencies, option
from harness.training.draft_vocab import sized_vocab
from methods.medusa.model import arch_for, new_heads

COMPONENT = "medusa_head"


@torch.no_grad()
def head_latency(target: PreTrainedModel, top_k: int, prefix: int, repeats: int, timing: str = "eager",
                 draft_vocab: int = 0) -> float:
    """Head 1 over ``top_k`` rows + their log-probabilities over ``draft_vocab`` tokens (0: the whole vocabulary;
    ``prefix`` plays no part)."""
    device = next(target.parameters()).device
    lm_head = target.get_output_embeddings()
    vocab = sized_vocab(int(lm_head.weight.shape[0]), draft_vocab)
    heads = new_heads(arch_for(target, 1, False, True), lm_head, 0, vocab).to(device, target.dtype).eval()
    state = torch.randn(top_k, heads.arch.hidden_size, device=device, dtype=target.dtype)

    def step() -> None:
        torch.log_softmax(heads.logits(1, heads.hidden(1, state), lm_head).float(), dim=-1)

    return timed_seconds(step, device, repeats, timing)


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    return int(option(options, "depth", 5)) * latencies.step(COMPONENT)


COST = CostModel(drafting_seconds, head_latency, COMPONENT)
