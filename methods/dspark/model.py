"""The DSpark drafter, in DeepSpec's layout (``deepspec/modeling/dspark``): the DFlash backbone
(``methods.dflash.model``, every slot drafting) plus

    markov_head.markov_w1   (V, r) embedding      bias_k = markov_w2(markov_w1[x_{k-1}])     (r: markov_rank)
    markov_head.markov_w2   (N, r) linear         logits_k = lm_head(h_k) + bias_k           (N: the draft vocabulary)
    confidence_head.proj    (1, H + r) + bias     c_k = sigmoid(proj([h_k; markov_w1[x_{k-1}]]) / T_k)

x_{-1} is the block's root (the last accepted token), x_k the token drafted at slot k. T_k are the confidence
temperatures fitted on held-out data (``methods.dspark.training.fit_temperatures``; 1 where none were fitted).
Only DeepSpec's ``vanilla`` Markov head is built; ``gated`` and ``rnn`` heads are refused with one line.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaConfig

from harness.training.draft_vocab import DraftVocab
from methods.dflash.model import DFlashDrafter


class MarkovHead(nn.Module):
    def __init__(self, vocab: int, rank: int, draft_vocab: int) -> None:
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, rank)
        self.markov_w2 = nn.Linear(rank, draft_vocab, bias=False)

    def forward(self, previous: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(bias over the vocabulary, the previous token's low-rank embedding) for tokens ``previous``."""
        embedded = self.markov_w1(previous)
        return self.markov_w2(embedded), embedded


class ConfidenceHead(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, 1)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.proj(inputs)[..., 0]


class DSparkDrafter(DFlashDrafter):
    """The backbone with its Markov and confidence heads (see the module docstring)."""

    def __init__(self, config: LlamaConfig, target_layer_ids: tuple[int, ...], mask_token_id: int | None,
                 target_hidden: int, anchor_predicts: bool = True, draft_vocab: DraftVocab | None = None) -> None:
        super().__init__(config, target_layer_ids, mask_token_id, target_hidden, anchor_predicts, draft_vocab)
        vocab, width = int(config.vocab_size), config.hidden_size
        self.markov_rank = int(getattr(config, "markov_rank", 0) or 0)
        self.with_markov = bool(getattr(config, "confidence_head_with_markov", True)) and self.markov_rank > 0
        self.markov_head = MarkovHead(vocab, self.markov_rank, self.draft_vocab.size) if self.markov_rank else None
        self.confidence_head = (ConfidenceHead(width + (self.markov_rank if self.with_markov else 0))
                                if getattr(config, "enable_confidence_head", True) else None)
        temperatures = list(getattr(config, "confidence_temperatures", None) or [])
        self.register_buffer("temperatures", torch.tensor(temperatures or [1.0] * self.block_size),
                             persistent=False)

    def slot(self, hidden: torch.Tensor, base_logits: torch.Tensor,
             previous: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(corrected logits, raw confidence logit) of slots with outputs ``hidden`` (..., H), the backbone's logits
        ``base_logits`` (..., N, the draft vocabulary) and the tokens before them ``previous`` (..., target ids)."""
        logits, inputs = base_logits, hidden
        if self.markov_head is not None:
            bias, embedded = self.markov_head(previous)
            logits = base_logits + bias.to(base_logits.dtype)
            if self.with_markov:
                inputs = torch.cat([hidden, embedded.to(hidden.dtype)], dim=-1)
        if self.confidence_head is None:  # a drafter without one: every slot predicted to survive
            return logits, torch.full(hidden.shape[:-1], float("inf"), device=hidden.device)
        return logits, self.confidence_head(inputs)

    def confidence(self, raw: torch.Tensor, slots: torch.Tensor | slice) -> torch.Tensor:
        """Calibrated survival probabilities of slots ``slots`` from their raw confidence logits."""
        return torch.sigmoid(raw.float() / self.temperatures[slots].to(raw.device))
