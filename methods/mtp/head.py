"""MTP modules (DeepSeek-V3's multi-token prediction, the layout of vLLM's ``deepseek_mtp``): per module ``enorm``
and ``hnorm`` (RMSNorm of the token embedding and of the incoming hidden state), ``eh_proj`` (2H -> H, no bias) over
[enorm(e); hnorm(h)], one Llama decoder layer (its own input norm), and ``head_norm`` (vLLM's
``shared_head.norm``) before the target's LM head. The token embedding and the LM head are the target's, frozen.
A module's output is its ``head_norm``-ed state, which the LM head reads and the next module takes as its hidden
state (DeepSeek-V3's next module reads it before that norm; its own ``hnorm`` normalises it again, so the two differ
by ``head_norm``'s weights alone). Every module's layer is layer 0 of one KV cache (one module, the default, drafts
as DeepSeek-V3's does; with several, a later module attends to the keys an earlier one wrote, as PRISM's modules do,
where DeepSeek-V3 trains each module with attention of its own). Parameter names:
``blocks.{m}.{enorm,hnorm,eh_proj,layer,head_norm}.*``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from harness.backend.kv_cache import cache_argument
from harness.errors import DraftcountError
from harness.training.features import FeatureSpec
from methods.prism.head import (
    StepModulesHead, load_step_modules_head, new_step_modules_head, save_step_modules_head,
)


class MtpBlock(nn.Module):
    """One MTP module (see the module docstring)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.enorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.hnorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.head_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)


class MtpHead(StepModulesHead):
    """M MTP modules; ``forward(..., step=k)`` runs module ((k - 1) mod M)."""

    def __init__(self, config: LlamaConfig, modules: int = 1) -> None:
        super().__init__()
        if modules < 1:
            raise DraftcountError(f"an MTP drafter needs at least one module, got {modules}")
        config._attn_implementation = "sdpa"
        self.config = config
        self.features = FeatureSpec("none", ("last",))
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.blocks = nn.ModuleList([MtpBlock(config) for _ in range(modules)])
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def module_index(self, step: int) -> int:
        return (step - 1) % len(self.blocks)

    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cache: DynamicCache | None = None, attention_bias: torch.Tensor | None = None,
                step: int = 1) -> torch.Tensor:
        """(B, q, H) head-normed outputs for pairs (hidden state at p, token at p + 1) by draft step ``step``'s
        module, appending to (and attending over) the shared ``cache``."""
        block = self.blocks[self.module_index(step)]
        embedded = self.embed_tokens(input_ids).to(features.dtype)
        hidden = block.eh_proj(torch.cat([block.enorm(embedded), block.hnorm(features)], dim=-1))
        out = block.layer(hidden, attention_mask=attention_bias, position_ids=position_ids,
                          use_cache=cache is not None, position_embeddings=self.rotary_emb(hidden, position_ids),
                          **cache_argument(block.layer, cache))
        return block.head_norm(out[0] if isinstance(out, tuple) else out)


def new_mtp_head(target: PreTrainedModel, modules: int, seed: int) -> MtpHead:
    """Fresh modules for ``target`` (EAGLE's initialisation of the linear layers, norms at one; the target's
    embedding, frozen)."""
    return new_step_modules_head(target, seed, lambda config: MtpHead(config, modules))


def save_mtp(head: MtpHead, out_dir: Path, provenance: dict) -> None:
    save_step_modules_head(head, out_dir, provenance, "mtp")


def load_mtp(source: str | Path, target: PreTrainedModel) -> MtpHead:
    """MTP modules trained here for ``target``, in eval mode."""
    return load_step_modules_head(source, target, "mtp", "MTP drafter",
                                  lambda config, meta: MtpHead(config, int(meta.get("modules", 1))))
