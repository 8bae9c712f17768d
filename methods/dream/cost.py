"""DREAM's cost model for the projection: EAGLE's schedule (a catch-up forward, then one expansion of top-k nodes
per depth: depth + 1 drafter steps), each step measured on DREAM's three-layer drafter."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from harness.engine.method_spec import CostModel, Latencies, option
from harness.training.draft_vocab import sized_vocab
from methods.dream.head import new_dream_head
from methods.eagle.cost import head_step_latency

COMPONENT = "dream_step"


@torch.no_grad()
def step_latency(target: PreTrainedModel, top_k: int, prefix: int, repeats: int, timing: str = "eager",
                 draft_vocab: int = 0) -> float:
    vocab = sized_vocab(int(target.get_output_embeddings().weight.shape[0]), draft_vocab)
    return head_step_latency(new_dream_head(target, seed=0, draft_vocab=vocab), target, top_k, prefix, repeats, timing)


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    return (int(option(options, "depth", 5)) + 1) * latencies.step(COMPONENT)


COST = CostModel(drafting_seconds, step_latency, COMPONENT)
