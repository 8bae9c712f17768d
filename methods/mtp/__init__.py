"""`mtp`: multi-token-prediction modules as a drafter (DeepSeek-V3's MTP; Qwen3-Next, Gemma-4 and vLLM's ``*_mtp``
types), here bolted on post hoc to the frozen target.

Module k: the target's (or module k-1's) hidden state h and the embedding of the next token, each RMS-normed,
concatenated and projected (``eh_proj``), one transformer block, then its own RMSNorm before the target's shared LM
head. Draft step k runs module ((k - 1) mod M) + 1, as vLLM reuses a model's MTP modules beyond their number; the
default drafter has one module (DeepSeek-V3 ships one). The default tree is a chain of 3 (``top_k: 1``), how MTP is
served (vLLM's ``num_speculative_tokens``); a wider beam drafts EAGLE-2 trees from the same modules.

head: the modules; checkpoint: ours, and MiMo's released MTP layers (vLLM's ``mimo_mtp``) read as modules;
adapter: EAGLE's adapter over them; training: training-time-test unrolling, token loss alone (an
MTP module regresses no feature); the projection reuses EAGLE's cost model (a step is one block).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.trees.beam_shape import BeamOptions


@dataclass(frozen=True)
class MtpOptions(BeamOptions):
    """The draft shape: a chain of 3 by default (top_k 1); the modules come with the drafter."""

    top_k: int = 1
    depth: int = 3
    budget: int = 3
