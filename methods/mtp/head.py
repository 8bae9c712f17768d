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

Two switches serve released MTP layers (``methods.mtp.checkpoint``): ``hidden_input: rescale`` makes ``hnorm`` a
per-channel scale for a layer that reads the target's state before its final norm (MiMo's: see ``FinalNormRescale``),
and ``zero_first_embedding`` zeroes the token embedding at position 0, as MiMo's layer does; a config with
``qkv_bias`` gives the layer Qwen2's q/k/v biases.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from harness.backend.kv_cache import cache_argument
from harness.errors import DraftcountError
from harness.training.draft_vocab import DraftVocab
from harness.training.features import FeatureSpec
from methods.eagle.head import add_qkv_biases
from methods.prism.head import (
    StepModulesHead, load_step_modules_head, new_step_modules_head, save_step_modules_head,
)


HIDDEN_INPUTS = ("norm", "rescale")


class FinalNormRescale(nn.Module):
    """``hnorm`` for a layer trained on the target's state h before its final norm (MiMo's ``hidden_layernorm``,
    weight w_h). The engine feeds the normed state n = w_f * h / rms(h) (w_f: the final norm's weight), and
    w_h * h / rms(h), which the layer wants, is (w_h / w_f) * n exactly (both norms with the same eps): so this
    module's ``weight`` holds w_h / w_f and it scales its input by it."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x


class MtpBlock(nn.Module):
    """One MTP module (see the module docstring)."""

    def __init__(self, config: LlamaConfig, hidden_input: str = "norm") -> None:
        super().__init__()
        hidden = config.hidden_size
        self.enorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.hnorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps) if hidden_input == "norm" else \
            FinalNormRescale(hidden)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        if getattr(config, "qkv_bias", False):
            add_qkv_biases(self.layer)
        self.head_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)


class MtpHead(StepModulesHead):
    """M MTP modules; ``forward(..., step=k)`` runs module ((k - 1) mod M)."""

    def __init__(self, config: LlamaConfig, modules: int = 1, hidden_input: str = "norm",
                 zero_first_embedding: bool = False, draft_vocab: DraftVocab | None = None) -> None:
        super().__init__()
        if modules < 1:
            raise DraftcountError(f"an MTP drafter needs at least one module, got {modules}")
        if hidden_input not in HIDDEN_INPUTS:
            raise DraftcountError(f"an MTP drafter's hidden_input is one of {', '.join(HIDDEN_INPUTS)}, got "
                                  f"{hidden_input!r}")
        config._attn_implementation = "sdpa"
        self.config = config
        self.draft_vocab = draft_vocab or DraftVocab(config.vocab_size)
        self.hidden_input, self.zero_first_embedding = hidden_input, zero_first_embedding
        self.features = FeatureSpec("none", ("last",))
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.blocks = nn.ModuleList([MtpBlock(config, hidden_input) for _ in range(modules)])
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
        if self.zero_first_embedding:
            embedded = embedded.masked_fill((position_ids == 0)[..., None], 0.0)
        hidden = block.eh_proj(torch.cat([block.enorm(embedded), block.hnorm(features)], dim=-1))
        out = block.layer(hidden, attention_mask=attention_bias, position_ids=position_ids,
                          use_cache=cache is not None, position_embeddings=self.rotary_emb(hidden, position_ids),
                          **cache_argument(block.layer, cache))
        return block.head_norm(out[0] if isinstance(out, tuple) else out)


def new_mtp_head(target: PreTrainedModel, modules: int, seed: int, draft_vocab: DraftVocab | None = None) -> MtpHead:
    """Fresh modules for ``target`` (EAGLE's initialisation of the linear layers, norms at one; the target's
    embedding, frozen), over ``draft_vocab`` (default: the full vocabulary)."""
    return new_step_modules_head(target, seed, lambda config: MtpHead(config, modules, draft_vocab=draft_vocab))


def save_mtp(head: MtpHead, out_dir: Path, provenance: dict) -> None:
    save_step_modules_head(head, out_dir, provenance, "mtp", hidden_input=head.hidden_input,
                           zero_first_embedding=head.zero_first_embedding)


def load_mtp(source: str | Path, target: PreTrainedModel) -> MtpHead:
    """MTP modules trained here (or converted by ``methods.mtp.checkpoint``) for ``target``, in eval mode."""
    return load_step_modules_head(source, target, "mtp", "MTP drafter",
                                  lambda config, meta, vocab: MtpHead(config, int(meta.get("modules", 1)),
                                                                      meta.get("hidden_input", "norm"),
                                                                      bool(meta.get("zero_first_embedding", False)),
                                                                      vocab))
