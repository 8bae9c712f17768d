"""Rules code_prompts, domain_prompts and calibration_prompts: code-completion prompts cut from standard-library
files (the held-out split for the benchmark, per domain for the mixed-domain set, the training split for
calibrating static trees)."""
from pathlib import Path

from harness.data.code_prompts import write_code_prompts

count = write_code_prompts(
    Path(snakemake.input[0]),  # noqa: F821
    Path(snakemake.output[0]),  # noqa: F821
    count=snakemake.params.prompts,  # noqa: F821
    lines=snakemake.params.lines,  # noqa: F821
    seed=snakemake.params.seed,  # noqa: F821
    domains=snakemake.params.get("domains"),  # noqa: F821
)
print(f"{count} code prompts")
