"""Rule measure_draft_step: one draft-LM step (4 tree tokens) on this hardware, for Sequoia's cost model."""
import json
from pathlib import Path

import torch

from harness.backend.models import load_model
from harness.measure.calibrations.latency import target_latencies

torch.set_num_threads(snakemake.params.torch_threads)  # noqa: F821  (the bench's threads; the rule runs alone)
settings = snakemake.params.tree  # noqa: F821
device, dtype = snakemake.params.device, snakemake.params.dtype  # noqa: F821
draft = load_model(snakemake.input.draft, dtype, device, with_tokenizer=False)  # noqa: F821
prefix = settings.get("latency_prefix", 256)
summary = {"device": str(draft.device), "prefix_tokens": prefix,
           "draft_step": target_latencies(draft.model, prefix, [4], settings.get("latency_repeats", 7))[4]}
Path(snakemake.output[0]).write_text(json.dumps(summary, indent=2) + "\n")  # noqa: F821
print(json.dumps(summary, indent=2))
