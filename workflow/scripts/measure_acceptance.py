"""Rule measure_acceptance: per-rank acceptance of the draft's children on held-out text."""
import json
from pathlib import Path

import torch

from harness.measure.calibrations.acceptance import rank_acceptance
from harness.engine.drafting import choose_children
from harness.data.token_streams import even_windows, load_tokens
from harness.backend.models import load_model
from harness.verify.sampling import SamplingConfig

torch.set_num_threads(snakemake.threads)  # noqa: F821
settings = snakemake.params.tree  # noqa: F821
temperature = float(snakemake.wildcards.temperature)  # noqa: F821
target = load_model(snakemake.input.target, with_tokenizer=False)  # noqa: F821
draft = load_model(snakemake.input.draft, with_tokenizer=False)  # noqa: F821
windows = even_windows(load_tokens(Path(snakemake.input.heldout)), settings.get("windows", 16),  # noqa: F821
                       settings.get("window_len", 128))
replacement = settings.get("replacement", "without") == "with"
acceptance = rank_acceptance(target, draft, windows, SamplingConfig(temperature), settings.get("max_rank", 8),
                             choose_children, replacement, seed=settings.get("seed", 0))
summary = {"temperature": temperature, "replacement": replacement, "positions": windows.numel(),
           "acceptance": acceptance}
Path(snakemake.output[0]).write_text(json.dumps(summary, indent=2) + "\n")  # noqa: F821
print(json.dumps(summary))
