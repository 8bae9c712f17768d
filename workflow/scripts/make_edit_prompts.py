"""Rule edit_prompts: the prompt set stdlib_edits, successive edits of held-out modules (harness.data.edit_prompts)."""
from pathlib import Path

from harness.data.edit_prompts import write_edit_prompts

count = write_edit_prompts(
    Path(snakemake.input[0]),  # noqa: F821
    Path(snakemake.output[0]),  # noqa: F821
    modules=snakemake.params.modules,  # noqa: F821
    versions=snakemake.params.versions,  # noqa: F821
    lines=snakemake.params.lines,  # noqa: F821
    seed=snakemake.params.seed,  # noqa: F821
)
print(f"{count} edit prompts")
