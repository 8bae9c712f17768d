"""Rule corpus: the training text (the Python standard library's source, or a JSON-lines file), split
train/held-out by document."""
import json
from pathlib import Path

from harness.data.corpus import build_jsonl_corpus, build_stdlib_corpus

settings = snakemake.params.corpus  # noqa: F821  (provided by Snakemake)
out_dir = Path(snakemake.output.summary).parent  # noqa: F821
fraction, seed = settings.get("heldout_fraction", 0.05), settings.get("seed", 0)
cap = settings.get("max_train_bytes")
if settings.get("source", "stdlib") == "jsonl":
    summary = build_jsonl_corpus(out_dir, Path(settings["path"]), fraction, seed, settings.get("field", "text"),
                                 max_train_bytes=cap)
else:
    summary = build_stdlib_corpus(out_dir, include_tests=settings.get("include_tests", False),
                                  heldout_fraction=fraction, seed=seed, max_train_bytes=cap)
print(json.dumps(summary["splits"], indent=2))
