"""Rules train_target / train_draft: train a zoo LM (resumable), evaluate it, hold it against its quality gates,
save it with its provenance. A DraftcountError (a gate, a bad setting) is one line on stderr, not a traceback."""
import json
import sys
from pathlib import Path

import torch

from harness.errors import DraftcountError
from harness.training.zoo_training import train_zoo_lm

torch.set_num_threads(snakemake.threads)  # noqa: F821
inputs, params = snakemake.input, snakemake.params  # noqa: F821
try:
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
        teacher_features=Path(inputs.features).parent if "features" in inputs.keys() else None,
        device=params.device,
        gates=params.gates,
        allow_weak=params.allow_weak,
    )
except DraftcountError as error:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(1)
print(json.dumps(metrics, indent=2))
