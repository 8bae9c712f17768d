"""Rule dump_features: target hidden states on training windows, as sharded safetensors."""
from pathlib import Path

import torch

from harness.training.features import dump_features
from harness.data.token_streams import load_tokens
from harness.backend.models import load_model

torch.set_num_threads(snakemake.threads)  # noqa: F821
settings = snakemake.params.features  # noqa: F821
model = load_model(snakemake.input.target, dtype=snakemake.params.dtype, device=snakemake.params.device,  # noqa: F821
                   with_tokenizer=False).model
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
    source=str(snakemake.input.train),  # noqa: F821
)
