# The zoo again from another seed (config `target_seeds`; harness/store/zoo_seeds.py): module zoo_seed (Snakefile)
# trains the target, its draft LM, its feature dump and the drafters with every training seed shifted by
# target_seeds.seed and benchmarks target_seeds.variants (and its A/A control) like the main comparison, under
# <work_dir>-zoo-seed<s>/ and <results_dir>/zoo-seed<s>/. Here its records are copied into the main results as
# <variant>_target<s> (rule target_seed_records), published like the main ones (rule records), and read by the claims
# table as <variant> on another target: a verdict stands only where both targets give it (methods/lyanna/
# claims_checks.py). Target zoo_seed is part of `studies`, not of `all`; the main report reads the copies when present
# (run `all` after `studies` to fold them in), the studies report always.

from harness.store.zoo_seeds import target_variant

# the seed and the variants copied (those the config runs: ZOO_SEED_CONFIG, harness/store/zoo_seeds.py); none when off
TARGET_SEED = config["target_seeds"]["seed"] if ZOO_SEED_CONFIG else 0
TARGET_SEED_VARIANTS = ([variant for variant in config["target_seeds"]["variants"]
                         if variant in ZOO_SEED_CONFIG["bench"]["only"]] if ZOO_SEED_CONFIG else [])


def zoo_seed_raw(variant):
    """The second zoo's raw records of one variant (its module's rule bench writes them)."""
    raw = Path(ZOO_SEED_CONFIG["results_dir"]) / "raw" / variant
    return expand(str(raw / "{dataset}-t{temperature}.jsonl"), dataset=plan.variant_datasets(ZOO_SEED_CONFIG, variant),
                  temperature=plan.variant_temperatures(ZOO_SEED_CONFIG, variant))


# the copies (results/raw/<variant>_target<s>/) and their published records (results/records/<variant>_target<s>/)
TARGET_SEED_RECORDS = [results(f"raw/{target_variant(variant, TARGET_SEED)}/{Path(path).name}")
                       for variant in TARGET_SEED_VARIANTS for path in zoo_seed_raw(variant)]
TARGET_SEED_PUBLISHED = [path.replace(results("raw/"), results("records/"), 1) + ".gz" for path in TARGET_SEED_RECORDS]


def present_target_seed_records(published=False):
    """The copies already made (a run of `studies` makes them), or their published records: what `all` reads."""
    return [(out if published else path) for path, out in zip(TARGET_SEED_RECORDS, TARGET_SEED_PUBLISHED)
            if Path(path).is_file()]


if ZOO_SEED_CONFIG:

    rule target_seed_records:
        input:
            str(Path(ZOO_SEED_CONFIG["results_dir"]) / "raw" / "{variant}" / "{name}.jsonl"),
        output:
            results("raw/{variant}_target%d/{name}.jsonl" % TARGET_SEED),
        params:
            seed=TARGET_SEED,
        wildcard_constraints:
            variant="|".join(map(re.escape, TARGET_SEED_VARIANTS)),
            name=r"[^/]+",
        localrule: True
        resources:
            mem_mb=500,
            runtime=1,
        script:
            "../scripts/target_seed_records.py"

    rule zoo_seed:
        # the second zoo: its records as the main report reads them, published, and its own summary table (with
        # its A/A control)
        input:
            TARGET_SEED_PUBLISHED,
            str(Path(ZOO_SEED_CONFIG["results_dir"]) / "tables" / "summary.csv"),
