"""Rules train_target / train_draft: train a zoo LM (resumable), evaluate it, save it with its provenance."""
import json
from pathlib import Path

import torch

from harness.training.zoo_training import train_zoo_lm

torch.set_num_threads(snakemake.threads)  # noqa: F821
inputs, params = snakemake.input, snakemake.params  # noqa: F821
metrics = train_zoo_lm(
    role=params.role,
    tokenizer_dir=Path(inputs.tokenizer),
    train_tokens=Path(inputs.train),
    heldout_tokens=Path(inputs.heldout),
    corpus_summary=Path(inputs.corpus),
    model_config=params.model,
    evaluation=params.evaluation,
    out_dir=Path(snakemake.output.model),  # noqa: F821
    metrics_path=Path(snakemake.output.metrics),  # noqa: F821
    checkpoint=Path(params.checkpoint),
    teacher_dir=Path(inputs.teacher) if "teacher" in inputs.keys() else None,
    device=params.device,
)
print(json.dumps(metrics, indent=2))
