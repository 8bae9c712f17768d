"""Training polybasic's mid LM: ``python -m harness train --method polybasic --target T --data TOKENS.pt --out DIR``.

The mid model is a Llama LM with the target's vocabulary, sized between the draft LM and the target, distilled
from the target on the token stream or its feature dump (KL(target || mid), ``harness.training.distill``) with the
zoo's shapes (``ModelShape``) and the shared training loop. A size option left at 0 is derived from the target: 5/8 of its
width (rounded up to an even width per head), a quarter of its layers (at least 2), its heads, and its MLP
ratio. The directory is a plain causal-LM checkpoint (with the target's tokenizer when it has one), which the
adapter loads as ``--drafter``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import AutoTokenizer, LlamaForCausalLM, PretrainedConfig

from harness.backend.models import LoadedModel
from harness.data.token_streams import even_windows, load_tokens
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.drafter_contract import COMPONENTS, parameter_components
from harness.training.drafters import (
    budgeted, fingerprint_options,
    AGREEMENT, META_FILE, DrafterTrainRequest, checked_agreement, drafter_provenance, feature_source, frozen_target,
    write_metrics,
)
from harness.training.distill import distillation_step_loss
from harness.training.loop import TrainConfig, train
from harness.training.zoo import ModelShape, heldout_perplexity, save_directory, top1_agreement


@dataclass(frozen=True)
class MidTrainOptions:
    """The mid model's training options. No ``draft_vocab`` (``harness.training.draft_vocab``): the mid model is a
    draft LM with its own LM head over the target's vocabulary, trained (distilled) as a whole LM, and it also
    verifies the small LM's drafts with that distribution; a reduced head would be a change to the LM itself, not a
    drafter's borrowed target-sized head."""

    hidden_size: int = 0  # 0: 5/8 of the target's width, rounded up to an even head_dim
    num_layers: int = 0  # 0: a quarter of the target's layers, at least 2
    num_heads: int = 0  # 0: the target's
    intermediate_size: int = 0  # 0: the target's MLP ratio times hidden_size
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 1e-3
    warmup_steps: int = 20
    warmup_fraction: float = 0.0  # > 0: warm up for this share of the steps (harness.training.loop.TrainConfig)
    distill_temperature: float = 1.0
    precision: Literal["fp32", "bf16"] = "fp32"
    seed: int = 0

    def __post_init__(self) -> None:
        sizes = {name: getattr(self, name) for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size")}
        negative = [name for name, value in sizes.items() if value < 0]
        if negative:
            raise DraftcountError(f"polybasic training: option {negative[0]!r} must be >= 0 "
                                  "(0: derived from the target)")
        if self.batch_size < 1 or self.seq_len < 2:
            raise DraftcountError(f"polybasic training: batch_size must be >= 1 and seq_len >= 2, got "
                                  f"{self.batch_size} and {self.seq_len}")


def mid_shape(options: MidTrainOptions, target_config: PretrainedConfig) -> ModelShape:
    """The mid LM's shape: the options, with every size left at 0 derived from the target (module docstring)."""
    text = getattr(target_config, "text_config", None) or target_config
    heads = options.num_heads or int(text.num_attention_heads)
    hidden = options.hidden_size or 2 * heads * math.ceil(int(text.hidden_size) * 5 / 8 / (2 * heads))  # even head_dim
    layers = options.num_layers or max(2, int(text.num_hidden_layers) // 4)
    ratio = int(text.intermediate_size) / int(text.hidden_size)
    intermediate = options.intermediate_size or max(1, round(hidden * ratio))
    context = int(getattr(text, "max_position_embeddings", 1024))
    return ModelShape(hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=intermediate,
                      context=context)


def new_mid(shape: ModelShape, target: LoadedModel, seed: int) -> LlamaForCausalLM:
    """A fresh mid LM with the target's vocabulary and special tokens."""
    text = getattr(target.config, "text_config", None) or target.config
    torch.manual_seed(seed)
    config = shape.config(target.vocab_size, text.bos_token_id, text.eos_token_id)
    config.pad_token_id = getattr(text, "pad_token_id", None)
    return LlamaForCausalLM(config).to(target.device)


def target_tokenizer(source: str):
    """The target's tokenizer, saved beside the mid LM; None for a target saved without one."""
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def train_mid(request: DrafterTrainRequest) -> dict:
    """Distil (with 0 steps: just initialise) the mid LM and save it to ``request.out``; its metrics."""
    options = parse_options(MidTrainOptions, request.options, "polybasic training")
    request = budgeted(request, options)
    target = frozen_target(request)
    source = feature_source(request, target, ["last"], options.seq_len)  # the target's logits: its head over these
    shape = mid_shape(options, target.config)
    mid = new_mid(shape, target, options.seed)

    def loss_fn(step: int) -> tuple[torch.Tensor, int]:
        return distillation_step_loss(mid, target.model, source, step, options.seed, options.batch_size,
                                      options.distill_temperature, target.device)

    config = TrainConfig(steps=request.steps, time_budget_s=request.time_budget_s, lr=options.lr,
                         warmup_steps=options.warmup_steps, warmup_fraction=options.warmup_fraction,
                         precision=options.precision, seed=options.seed)
    fingerprint = {"method": "polybasic", "target": request.target, "data": str(request.data), **fingerprint_options(options),
                   "shape": asdict(shape)}
    result = train(mid, loss_fn, config, request.checkpoint, fingerprint, "train polybasic mid LM", request.progress)
    mid.eval()
    parameters = sum(parameter.numel() for parameter in mid.parameters())
    metrics = {"method": "polybasic", "shape": asdict(shape), "trainable_parameters": parameters,
               COMPONENTS: parameter_components(mid),
               "target_parameters": target.num_parameters, "options": asdict(options), "train": result.as_dict(),
               "target": request.target, "data": str(request.data)}
    if request.heldout is not None:
        windows = even_windows(load_tokens(request.heldout), 16, options.seq_len).to(target.device)
        metrics["heldout_perplexity"] = heldout_perplexity(mid, windows)
        # the mid LM drafts its block one token at a time: its one step is its next-token agreement (the kit's contract)
        metrics[AGREEMENT] = checked_agreement("polybasic", [top1_agreement(target.model, mid, windows)])
    save_mid(request, mid, metrics, result)
    return metrics


def save_mid(request: DrafterTrainRequest, mid: LlamaForCausalLM, metrics: dict, result) -> None:
    tokenizer = target_tokenizer(request.target)

    def save(path: Path) -> None:
        mid.cpu().save_pretrained(path)
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
        write_metrics(path / META_FILE, {**drafter_provenance(request, result), "kind": "polybasic-mid",
                                               "metrics": metrics})

    save_directory(Path(request.out), save)
