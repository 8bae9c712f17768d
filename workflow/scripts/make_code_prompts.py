"""Rule code_prompts: code-completion prompts cut from held-out standard-library files."""
from pathlib import Path

from harness.data.code_prompts import write_code_prompts

settings = snakemake.params.prompts  # noqa: F821
count = write_code_prompts(
    Path(snakemake.input.heldout),  # noqa: F821
    Path(snakemake.output[0]),  # noqa: F821
    count=settings.get("code_prompts", 20),
    lines=settings.get("code_prompt_lines", 12),
    seed=settings.get("seed", 0),
)
print(f"{count} code prompts")
