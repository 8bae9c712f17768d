"""Rule dump_features: target hidden states on training windows, as sharded safetensors."""
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from harness.features import dump_features
from harness.lm_data import load_tokens

torch.set_num_threads(snakemake.threads)  # noqa: F821
settings = snakemake.params.features  # noqa: F821
model = AutoModelForCausalLM.from_pretrained(snakemake.input.target).eval()  # noqa: F821
dump_features(
    model,
    load_tokens(Path(snakemake.input.train)),  # noqa: F821
    Path(snakemake.output.index).parent,  # noqa: F821
    sequences=settings.get("sequences", 256),
    seq_len=settings.get("seq_len", 256),
    layers=settings.get("layers", ["last"]),
    shard_size=settings.get("shard_size", 64),
    dtype=settings.get("dtype", "float16"),
    seed=settings.get("seed", 0),
)
