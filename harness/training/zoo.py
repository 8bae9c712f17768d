"""The default model zoo, built from data every machine has: a byte-level BPE tokenizer,
a Llama target trained on the corpus, a smaller draft LM distilled from the target (or, with
``architecture: bamba``, a hybrid Mamba2 target and a Mamba2 draft LM: workflow/config/hybrid.yaml).

Everything is saved with ``save_pretrained`` so it loads through the same
AutoModelForCausalLM / AutoTokenizer path real checkpoints use, and every model
directory carries ``draftcount.json`` saying how it was made.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    BambaConfig, BambaForCausalLM, LlamaConfig, LlamaForCausalLM, PretrainedConfig, PreTrainedModel,
    PreTrainedTokenizerFast,
)

from harness.store.atomic import atomic_path
from harness.data.corpus import Document
from harness.errors import DraftcountError
from harness.store.provenance import PROVENANCE
from harness.store.records import environment

BOS, EOS = "<|bos|>", "<|endoftext|>"


@dataclass(frozen=True)
class ModelShape:
    """A zoo model's shape: a Llama, or (``architecture: bamba``) a hybrid of Mamba2 layers with attention at
    ``attention_layers`` (none: a pure Mamba2 LM, STree's drafter), each Mamba2 layer of ``mamba_expand`` x
    hidden_size channels in heads of ``mamba_head_dim``, state ``mamba_state``, convolution width ``mamba_conv``."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    context: int = 1024
    num_kv_heads: int | None = None
    tie_embeddings: bool = False
    architecture: Literal["llama", "bamba"] = "llama"
    attention_layers: tuple[int, ...] = ()
    mamba_head_dim: int = 32
    mamba_state: int = 32
    mamba_groups: int = 1
    mamba_conv: int = 4
    mamba_expand: int = 2

    def config(self, vocab_size: int, bos_id: int, eos_id: int) -> PretrainedConfig:
        if self.hidden_size % self.num_heads:
            raise DraftcountError(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        common = dict(vocab_size=vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
                      num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
                      num_key_value_heads=self.num_kv_heads or self.num_heads, max_position_embeddings=self.context,
                      bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=eos_id,
                      tie_word_embeddings=self.tie_embeddings)
        if self.architecture == "llama":
            return LlamaConfig(**common, rope_theta=10000.0)
        channels = self.mamba_expand * self.hidden_size
        outside = [index for index in self.attention_layers if not 0 <= index < self.num_layers]
        if outside or channels % self.mamba_head_dim or (channels // self.mamba_head_dim) % self.mamba_groups:
            raise DraftcountError(f"bamba shape: attention layers {list(self.attention_layers)} must lie in 0.."
                                  f"{self.num_layers - 1}, and {channels} Mamba2 channels must split into heads of "
                                  f"{self.mamba_head_dim} in {self.mamba_groups} groups")
        return BambaConfig(**common, attn_layer_indices=list(self.attention_layers),
                           mamba_n_heads=channels // self.mamba_head_dim, mamba_d_head=self.mamba_head_dim,
                           mamba_d_state=self.mamba_state, mamba_n_groups=self.mamba_groups,
                           mamba_d_conv=self.mamba_conv, mamba_expand=self.mamba_expand,
                           use_cache=False)  # (transformers' own cache: never used, and it fails a Mamba2 LM)


def train_tokenizer(documents: list[Document], vocab_size: int, out_dir: Path, max_bytes: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE on up to ``max_bytes`` of the documents; BOS is prepended on encode."""
    if vocab_size < 300:
        raise DraftcountError(f"vocab_size must be >= 300 (256 bytes + merges + specials), got {vocab_size}")

    def texts():
        used = 0
        for document in documents:
            if used >= max_bytes:
                return
            used += len(document.text)
            yield document.text

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS, BOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=True,
    )
    tokenizer.train_from_iterator(texts(), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS, pad_token=EOS)
    save_directory(out_dir, fast.save_pretrained)
    return fast


def new_model(shape: ModelShape, tokenizer: PreTrainedTokenizerFast, seed: int) -> PreTrainedModel:
    torch.manual_seed(seed)
    config = shape.config(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)
    model = (LlamaForCausalLM if shape.architecture == "llama" else BambaForCausalLM)(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.pad_token_id = tokenizer.eos_token_id
    return model


def grow_depth(model: LlamaForCausalLM, num_layers: int, seed: int) -> LlamaForCausalLM:
    """``model`` deepened to ``num_layers`` decoder layers without changing what it computes (Net2Net-style
    identity expansion): the base layers keep their order, evenly spaced (base layer j at position
    j x num_layers / base), and every new layer starts with zero output projections (attention ``o_proj``, MLP
    ``down_proj``), so it adds nothing to the residual stream until training makes it useful. Embeddings, final
    norm and LM head are the base's. Every new layer costs a real layer's compute from the start."""
    base = model.config.num_hidden_layers
    if not isinstance(model, LlamaForCausalLM):
        raise DraftcountError(f"grow: only a Llama target can be deepened, not a {type(model).__name__} (set "
                              "target.grow.num_layers: 0)")
    if num_layers <= base or num_layers % base:
        raise DraftcountError(f"grow: num_layers {num_layers} must be a multiple of the base's {base} layers, "
                              "and larger")
    torch.manual_seed(seed)
    config = model.config.__class__.from_dict({**model.config.to_dict(), "num_hidden_layers": num_layers})
    grown = LlamaForCausalLM(config).to(next(model.parameters()).device)
    grown.generation_config = model.generation_config
    stride = num_layers // base
    state = {key: value for key, value in model.state_dict().items() if not key.startswith("model.layers.")}
    for index, layer in enumerate(model.model.layers):
        state.update({f"model.layers.{index * stride}.{key}": value for key, value in layer.state_dict().items()})
    for index, layer in enumerate(grown.model.layers):
        if index % stride:
            torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
            torch.nn.init.zeros_(layer.mlp.down_proj.weight)
    missing, unexpected = grown.load_state_dict(state, strict=False)
    if unexpected or any(not key.startswith("model.layers.") for key in missing):
        raise DraftcountError(f"grow: unexpected weights {unexpected[:3]}, missing {missing[:3]}")
    return grown


def next_token_loss(model: LlamaForCausalLM, windows: torch.Tensor) -> torch.Tensor:
    return model(input_ids=windows, labels=windows).loss


def kl_to_teacher(teacher: torch.Tensor, student: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean over positions of KL(teacher || student) between logits (..., V) at ``temperature``, scaled by
    temperature**2."""
    teacher_logp = F.log_softmax(teacher.float() / temperature, dim=-1)
    student_logp = F.log_softmax(student.float() / temperature, dim=-1)
    kl = (teacher_logp.exp() * (teacher_logp - student_logp)).sum(-1).mean()
    return kl * temperature**2


@torch.no_grad()
def heldout_perplexity(model: LlamaForCausalLM, windows: torch.Tensor, batch_size: int = 8) -> float:
    losses = []
    for start in range(0, windows.shape[0], batch_size):
        batch = windows[start : start + batch_size]
        losses.append(model(input_ids=batch, labels=batch).loss.float() * batch.shape[0])
    return float(torch.exp(torch.stack(losses).sum() / windows.shape[0]))


@torch.no_grad()
def top1_agreement(target: LlamaForCausalLM, draft: LlamaForCausalLM, windows: torch.Tensor, batch_size: int = 8) -> float:
    """Fraction of positions where the draft's argmax equals the target's."""
    agree = total = 0
    for start in range(0, windows.shape[0], batch_size):
        batch = windows[start : start + batch_size]
        agree += int((target(input_ids=batch).logits.argmax(-1) == draft(input_ids=batch).logits.argmax(-1)).sum())
        total += batch.numel()
    return agree / total


def repetition_rate(tokens: list[int], n: int = 4) -> float:
    """1 - distinct n-grams / n-grams: 0 for text that never repeats an n-gram, near 1 for loops."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def save_directory(out_dir: Path, save: Callable[[Path], None]) -> None:
    """Save into ``out_dir.partial`` and rename, so ``out_dir`` only ever holds a complete save."""
    with atomic_path(out_dir) as partial:
        save(partial)


def save_model(out_dir: Path, model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, provenance: dict) -> None:
    def save(path: Path) -> None:
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        (path / PROVENANCE).write_text(json.dumps(
            {**provenance, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **environment()}, indent=2, default=str
        ) + "\n")

    save_directory(out_dir, save)
