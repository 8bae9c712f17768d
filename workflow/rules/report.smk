# Aggregation, figures, report and the Spec-Bench export, all from the raw records of every bench job.

FIGURE_NAMES = ["speedup", "phases", "tau", "waste", "budget", "depth", "ablation", "efficiency", "samples",
                "categories", "context_length"]


# Two reports: the main comparison's (target `all`: results/tables, figures, report.md) over the variants in no
# study, and the studies' (target `studies`: results/studies/...) over every variant, the main ones included.
MAIN_RECORDS = bench_outputs(plan.main_variants(config))  # the main comparison's raw records


def scope_variants(scope):
    return plan.main_variants(config) if scope == "main" else variant_names()


def scope_main(scope):
    """The variants the scope's report and figures treat as run on every dataset (the rest: ablations)."""
    return ",".join(plan.main_variants(config) if scope == "main" else plan.every_dataset_variants(config))


def training_metrics(scope):
    """Metrics files of the models and drafters the scope's variants used that the workflow trained."""
    paths = [] if external_models() else [work("metrics/target.json"), work("metrics/draft.json")]
    used = {variant_drafter(variant) for variant in scope_variants(scope) if plan.needs_drafter(variant_method(variant))}
    return paths + [work(f"metrics/drafter-{name}.json") for name in trained_drafters() if name in used]


def scope_compare(scope):
    chosen = scope_variants(scope)
    return ",".join(f"{variant}={against}" for variant, against in config.get("report", {}).get("compare", {}).items()
                    if variant in chosen and against in chosen)


rule summary:
    input:
        MAIN_RECORDS,
    output:
        summary=results("tables/summary.csv"),
        depth=results("tables/depth_acceptance.csv"),
        samples=results("tables/samples.csv"),
        hedge=results("tables/hedgespec.csv"),
        categories=results("tables/categories.csv"),
        context=results("tables/context_length.csv"),
    resources:
        mem_mb=2000,
        runtime=5,
    shell:
        "python -m harness summarize {input} --out {output.summary} --depth-out {output.depth}"
        " --samples-out {output.samples} --hedge-out {output.hedge} --categories-out {output.categories}"
        " --context-out {output.context}"


rule figures:
    input:
        summary=results("tables/summary.csv"),
        depth=results("tables/depth_acceptance.csv"),
        samples=results("tables/samples.csv"),
        categories=results("tables/categories.csv"),
        context=results("tables/context_length.csv"),
    output:
        expand(results("figures/{name}.{suffix}"), name=FIGURE_NAMES, suffix=["pdf", "png"]),
    params:
        out_dir=results("figures"),
        main=scope_main("main"),
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "python -m harness figures --summary {input.summary} --depth {input.depth} --out-dir {params.out_dir}"
        " --samples {input.samples} --categories {input.categories} --context {input.context} --main {params.main}"


rule report:
    input:
        records=MAIN_RECORDS,
        summary=results("tables/summary.csv"),
        samples=results("tables/samples.csv"),
        hedge=results("tables/hedgespec.csv"),
        categories=results("tables/categories.csv"),
        context=results("tables/context_length.csv"),
        figures=expand(results("figures/{name}.png"), name=FIGURE_NAMES),
        metrics=training_metrics("main"),
    output:
        results("report.md"),
    params:
        figures=results("figures"),
        main=scope_main("main"),
        compare=scope_compare("main"),
    resources:
        mem_mb=2000,
        runtime=5,
    shell:
        "python -m harness report {input.records} --summary {input.summary} --figures {params.figures}"
        " --metrics {input.metrics} --samples {input.samples} --hedge {input.hedge} --categories {input.categories} --main {params.main}"
        " --context {input.context} --compare '{params.compare}' --out {output}"


rule export_specbench:
    # Spec-Bench's answer-file layout: specbench/<dataset>-t<T>/model_answer/<variant>.jsonl (+ .ar.jsonl), of the
    # main comparison
    input:
        MAIN_RECORDS,
    output:
        directory(results("specbench")),
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "python -m harness export-specbench {input} --out-dir {output}"


# The studies' tables, figures and report: the same rules over every variant, under results/studies/.
STUDY_TABLES = {name: results(f"studies/tables/{name}.csv")
                for name in ("summary", "depth_acceptance", "samples", "hedgespec", "categories", "context_length")}


use rule summary as studies_summary with:
    input:
        bench_outputs(),
    output:
        summary=STUDY_TABLES["summary"],
        depth=STUDY_TABLES["depth_acceptance"],
        samples=STUDY_TABLES["samples"],
        hedge=STUDY_TABLES["hedgespec"],
        categories=STUDY_TABLES["categories"],
        context=STUDY_TABLES["context_length"],


use rule figures as studies_figures with:
    input:
        summary=STUDY_TABLES["summary"],
        depth=STUDY_TABLES["depth_acceptance"],
        samples=STUDY_TABLES["samples"],
        categories=STUDY_TABLES["categories"],
        context=STUDY_TABLES["context_length"],
    output:
        expand(results("studies/figures/{name}.{suffix}"), name=FIGURE_NAMES, suffix=["pdf", "png"]),
    params:
        out_dir=results("studies/figures"),
        main=scope_main("studies"),


use rule report as studies_report with:
    input:
        records=bench_outputs(),
        summary=STUDY_TABLES["summary"],
        samples=STUDY_TABLES["samples"],
        hedge=STUDY_TABLES["hedgespec"],
        categories=STUDY_TABLES["categories"],
        context=STUDY_TABLES["context_length"],
        figures=expand(results("studies/figures/{name}.png"), name=FIGURE_NAMES),
        metrics=training_metrics("studies"),
    output:
        results("studies/report.md"),
    params:
        figures=results("studies/figures"),
        main=scope_main("studies"),
        compare=scope_compare("studies"),


rule studies:
    # every study's runs (and the main comparison's, which they are read beside), the studies' report
    input:
        zoo_outputs(),
        bench_outputs(),
        results("studies/report.md"),


# study_<name>: one study's runs
for _study in plan.study_names(config):

    rule:
        name:
            f"study_{_study}"
        input:
            bench_outputs(plan.study_variants(config, _study)),
