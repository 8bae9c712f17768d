"""Rule target_seed_records: a run of the zoo of another target seed (module zoo_seed) copied into the main results,
its method records renamed <variant>_target<seed> (harness/store/zoo_seeds.py)."""
from harness.store.zoo_seeds import write_target_seed_records

count = write_target_seed_records(snakemake.input[0], snakemake.output[0], int(snakemake.params.seed))  # noqa: F821
print(f"{count} records")
