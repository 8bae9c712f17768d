"""Rule measure_latency: the target's forward latency per tree size, on this hardware."""
import json
from pathlib import Path

import torch

from harness.measure.calibrations.latency import target_latencies
from harness.backend.models import load_model

torch.set_num_threads(snakemake.params.torch_threads)  # noqa: F821  (the bench's threads; the rule runs alone)
settings = snakemake.params.tree  # noqa: F821
device, dtype = snakemake.params.device, snakemake.params.dtype  # noqa: F821
target = load_model(snakemake.input.target, dtype, device, with_tokenizer=False)  # noqa: F821
sizes = settings.get("latency_sizes", [1, 2, 4, 8, 16, 32, 64])
prefix = settings.get("latency_prefix", 256)
summary = {
    "device": str(target.device),
    "prefix_tokens": prefix,
    "target": target_latencies(target.model, prefix, sizes, settings.get("latency_repeats", 7)),
}
Path(snakemake.output[0]).write_text(json.dumps(summary, indent=2) + "\n")  # noqa: F821
print(json.dumps(summary, indent=2))
