"""Model shapes the measurements build with random weights: Llama-3.1-8B's and Llama-3.2-1B's (``SHAPES``, scaled
down for CPU checks by ``scaled_shape``), the default small Llama of the engine diagnostics (``SMALL_LLAMA``), and a
workflow config's target (``config_target_shape``). Shared by the diagnostics and the projections."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from harness.backend.models import random_llama
from harness.errors import DraftcountError
from harness.training.zoo import ModelShape

SHAPES: dict[str, dict[str, int]] = {
    "llama-3.1-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
    "llama-3.2-1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
}


def scaled_shape(shape: dict[str, int], divisor: int) -> dict[str, int]:
    """The shape with widths, heads, layers and vocabulary divided by ``divisor`` (for CPU checks)."""
    if divisor < 1:
        raise ValueError(f"divisor must be >= 1, got {divisor}")
    return {key: max(1, value // divisor) for key, value in shape.items()}


def shaped_llama(shape: dict[str, int], dtype: torch.dtype, device: str) -> LlamaForCausalLM:
    """A randomly initialised Llama of ``shape`` (the current random state), in ``dtype`` on ``device``."""
    config = LlamaConfig(**shape, max_position_embeddings=16384, tie_word_embeddings=False)
    return random_llama(config, None, dtype, device)


SMALL_LLAMA = LlamaConfig(  # the default model: a ~20M-parameter Llama with random weights
    vocab_size=8192, hidden_size=384, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=6,
    num_key_value_heads=6, max_position_embeddings=2048, tie_word_embeddings=False,
    bos_token_id=None, eos_token_id=None, pad_token_id=None,
)


def config_target_shape(paths: list[Path]) -> tuple[ModelShape, int]:
    """The target's shape and the tokenizer's vocabulary size in the workflow config files ``paths``, a later
    file's keys over an earlier one's (as Snakemake's --configfile merges them)."""
    import yaml

    shape: dict = {}
    vocab_size = None
    grown = None
    for path in paths:
        if not path.is_file():
            raise DraftcountError(f"no config file {path}")
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        shape.update((config.get("target") or {}).get("shape") or {})
        grown = ((config.get("target") or {}).get("grow") or {}).get("num_layers", grown)  # 0: no growth
        vocab_size = (config.get("tokenizer") or {}).get("vocab_size", vocab_size)
    if grown:  # the target as benchmarked: deepened by target.grow
        shape["num_layers"] = grown
    if not shape or vocab_size is None:
        raise DraftcountError(f"{', '.join(map(str, paths))}: need target.shape and tokenizer.vocab_size")
    try:
        return ModelShape(**shape), int(vocab_size)
    except TypeError as error:
        raise DraftcountError(f"target.shape in {', '.join(map(str, paths))}: {error}") from None


def random_llama_shaped(shape: ModelShape, vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """A Llama of ``shape`` with random weights and no BOS/EOS/pad tokens."""
    return random_llama(shape.config(vocab_size, bos_id=None, eos_id=None), seed)
