"""Rule long_prompts: long-context prompts cut from the held-out standard-library files, in buckets of target
tokens (``harness.data.long_context``; OWL's context-length evaluation)."""
from pathlib import Path

from harness.data.long_context import DEFAULT_BUCKETS, write_long_prompts

count = write_long_prompts(
    Path(snakemake.input.heldout),  # noqa: F821
    Path(snakemake.input.tokenizer),  # noqa: F821
    Path(snakemake.output[0]),  # noqa: F821
    buckets=list(snakemake.params.get("buckets") or DEFAULT_BUCKETS),  # noqa: F821
    per_bucket=snakemake.params.prompts,  # noqa: F821
    seed=snakemake.params.seed,  # noqa: F821
    tolerance=snakemake.params.get("tolerance", 0.1),  # noqa: F821
)
print(f"{count} long-context prompts")
