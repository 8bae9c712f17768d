# draftcount workflow: build the default model zoo, benchmark every method, aggregate.
#
#   snakemake --cores all                                   # the main comparison (target all)
#   snakemake --cores all studies                           # the studies: ablations, families, GTO, domains, ...
#   snakemake --cores all --profile workflow/profiles/smoke # the same in minutes
#   snakemake --cores all bench_sd                          # one method's runs (bench_<m> for every catalog method)
#   snakemake --cores all results/figures/speedup.pdf      # one figure (and what it needs)
#   snakemake --cores all checks                            # lossless, divergence, overheads, host syncs, projection
#   snakemake --cores all real                              # the real-model comparison: SmolLM2-135M (results/smollm2)
#   snakemake --cores all zoo_seed                          # the zoo again from other seeds (in studies; results/zoo-seed1)
#   snakemake --cores all load                              # batch sizes against throughput (bench.batch_sizes)
#   snakemake --cores all study_vlm --configfile workflow/config/default.yaml workflow/config/vlm.yaml  # bar charts
#   snakemake -n                                            # list what would run
#   snakemake --profile workflow/profiles/gpu all checks    # a GPU box: everything, on the GPU
#   bash workflow/scripts/gpu_quick.sh                      # a lent GPU window: the quick check (target quick)
#   snakemake --configfile workflow/config/llama3-8b.yaml --profile workflow/profiles/slurm
#
# The default config is used only when no --configfile is given: a config file given on the
# command line stands on its own (list default.yaml first to build on it, as the smoke profile does).
import yaml
from snakemake.utils import min_version

from harness.store.workflow_config import checked_config, or_stop
from harness.store.zoo_seeds import zoo_seed_config

min_version("9.0")


if not workflow.overwrite_configfiles:

    configfile: "workflow/config/default.yaml"



# --config's true/false and numbers coerced to the schema's types; a bad config: one line, the section's keys
or_stop(lambda: checked_config(config, Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"))
# the second zoo's config (`target_seeds`, workflow/rules/zoo_seed.smk), from the config before the rules add to it
ZOO_SEED_CONFIG = or_stop(lambda: zoo_seed_config(config))


include: "workflow/rules/common.smk"
include: "workflow/rules/zoo.smk"
include: "workflow/rules/real.smk"
include: "workflow/rules/tree.smk"
include: "workflow/rules/model_free.smk"
include: "workflow/rules/drafter_studies.smk"  # before drafters.smk: it adds the studies' drafter entries
include: "workflow/rules/drafters.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/zoo_seed.smk"  # before report.smk: the main report reads the second zoo's records
include: "workflow/rules/report.smk"
include: "workflow/rules/checks.smk"
include: "workflow/rules/quick.smk"
include: "workflow/rules/load.smk"
include: "workflow/rules/vlm.smk"


# Target `real`: the real-model comparison (config `real`: workflow/config/smollm2.yaml, SmolLM2-135M-Instruct from
# PyPI), this same workflow under that config as a module: its rules are named real_<rule>, its work and results
# dirs are its own (results/smollm2), its target `all` is `real`. The config it names holds no `real` itself.
# With a `learning_curves` section, `real` runs its learning curves too (issue 80: the curves are part of the run).
if config.get("real"):
    REAL_CONFIG = yaml.safe_load(Path(config["real"]).read_text())

    module real_model:
        snakefile:
            "Snakefile"
        config:
            REAL_CONFIG

    use rule * from real_model as real_*

    rule real:
        input:
            rules.real_all.input,
            rules.real_study_learning_curves.input if "learning_curves" in REAL_CONFIG else [],


# Target `zoo_seed` (config `target_seeds`, part of `studies`): the zoo again with every training seed shifted, this
# same workflow under that config as a module (rules zoo_seed_<rule>, work-zoo-seed<s>/, results/zoo-seed<s>/) running
# the decisive variants only; rule target_seed_records copies their records as <variant>_target<s> (zoo_seed.smk).
if ZOO_SEED_CONFIG:

    module zoo_seed:
        snakefile:
            "Snakefile"
        config:
            ZOO_SEED_CONFIG

    use rule * from zoo_seed as zoo_seed_*


rule all:
    # the main comparison: every catalog method's main variant (no `study`), the control, the report
    default_target: True
    input:
        zoo_outputs(),
        MAIN_RECORDS,
        PUBLISHED_RECORDS,
        present_target_seed_records(published=True),  # the second zoo's, once `studies` made them (zoo_seed.smk)
        results("tables/summary.csv"),
        results("report.md"),
        results("specbench"),

