"""OWL's cost model for the projection: one LSTM step per depth (depth steps: the root's, then one per expanded
frontier), each measured as one step over ``top_k`` rows and their LM-head logits. No term grows with the context
(``prefix`` is ignored: the drafter never sees it). HOWL's retrieved chains (host work) are not modelled."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from harness.engine.method_spec import CostModel, Latencies, option
from harness.backend.timed import timed_seconds
from harness.training.draft_vocab import sized_vocab
from methods.owl.model import LstmState, arch_for, new_lstm

COMPONENT = "owl_step"


@torch.no_grad()
def step_latency(target: PreTrainedModel, top_k: int, prefix: int, repeats: int, timing: str = "eager",
                 draft_vocab: int = 0) -> float:
    """One LSTM step over ``top_k`` frontier nodes + their log-probabilities over ``draft_vocab`` tokens (0: the
    whole vocabulary; ``prefix`` plays no part)."""
    device = next(target.parameters()).device
    lm_head = target.get_output_embeddings()
    vocab = sized_vocab(int(lm_head.weight.shape[0]), draft_vocab)
    drafter = new_lstm(arch_for(target, 5), 0, vocab).to(device, target.dtype).eval()
    hidden = drafter.arch.hidden_size
    carried = LstmState(torch.randn(top_k, hidden, device=device, dtype=target.dtype),
                        torch.randn(top_k, hidden, device=device, dtype=target.dtype))
    tokens = torch.randint(drafter.arch.vocab_size, (top_k,), device=device)

    def step() -> None:
        stepped = drafter.step(carried, tokens)
        torch.log_softmax(drafter.logits(stepped.state, lm_head).float(), dim=-1)

    return timed_seconds(step, device, repeats, timing)


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    return int(option(options, "depth", 5)) * latencies.step(COMPONENT)


COST = CostModel(drafting_seconds, step_latency, COMPONENT)
