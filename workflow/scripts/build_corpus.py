"""Rule corpus: the Python standard library's source, split train/held-out by file."""
import json
from pathlib import Path

from harness.corpus import build_stdlib_corpus

settings = snakemake.params.corpus  # noqa: F821  (provided by Snakemake)
summary = build_stdlib_corpus(
    Path(snakemake.output.summary).parent,  # noqa: F821
    include_tests=settings.get("include_tests", False),
    heldout_fraction=settings.get("heldout_fraction", 0.05),
    seed=settings.get("seed", 0),
)
print(json.dumps(summary["splits"], indent=2))
