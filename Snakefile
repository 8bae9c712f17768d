# draftcount workflow: build the default model zoo, benchmark every method, aggregate.
#
#   snakemake --cores all                                   # the default pipeline
#   snakemake --cores all --profile workflow/profiles/smoke # the same in minutes
#   snakemake --cores all bench_sd                          # one method's runs
#   snakemake -n                                            # list what would run
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "workflow/config/default.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/zoo.smk"
include: "workflow/rules/tree.smk"
include: "workflow/rules/drafters.smk"
include: "workflow/rules/bench.smk"


rule all:
    default_target: True
    input:
        zoo_outputs(),
        bench_outputs(),
        results("tables/summary.csv"),
