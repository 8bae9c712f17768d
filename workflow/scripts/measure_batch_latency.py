"""Rule measure_batch_latency: the target's forward latency per batch size and tree size, on this hardware (the
load study's tree size per B: harness.measure.projections.load --batch-latency)."""
import json
from pathlib import Path

import torch

from harness.backend.models import load_model
from harness.measure.calibrations.latency import batch_latencies

torch.set_num_threads(snakemake.params.torch_threads)  # noqa: F821  (the bench's threads; the rule runs alone)
settings = snakemake.params.tree  # noqa: F821
device, dtype = snakemake.params.device, snakemake.params.dtype  # noqa: F821
target = load_model(snakemake.input.target, dtype, device, with_tokenizer=False)  # noqa: F821
prefix = settings.get("latency_prefix", 256)
latencies = batch_latencies(target.model, prefix, settings.get("latency_sizes", [1, 2, 4, 8, 16, 32, 64]),
                            snakemake.params.batch_sizes, settings.get("latency_repeats", 7))  # noqa: F821
summary = {"device": str(target.device), "prefix_tokens": prefix,
           "target_by_batch": {str(rows): {str(size): seconds for size, seconds in sizes.items()}
                               for rows, sizes in latencies.items()}}
Path(snakemake.output[0]).write_text(json.dumps(summary, indent=2) + "\n")  # noqa: F821
print(json.dumps(summary, indent=2))
