# Aggregation, figures, report and the Spec-Bench export, all from the raw records of every bench job.

FIGURE_NAMES = ["speedup", "tau", "waste", "budget", "depth", "ablation", "efficiency", "samples", "categories",
                "context_length"]


def main_variants():
    return ",".join(plan.main_variants(config))


def training_metrics():
    """Metrics files of the models and drafters the workflow trained (none for user-supplied ones)."""
    paths = [] if external_models() else [work("metrics/target.json"), work("metrics/draft.json")]
    used = {variant_drafter(variant) for variant in variant_names() if plan.needs_drafter(variant_method(variant))}
    return paths + [work(f"metrics/drafter-{name}.json") for name in trained_drafters() if name in used]


rule summary:
    input:
        bench_outputs(),
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
        main=main_variants(),
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "python -m harness figures --summary {input.summary} --depth {input.depth} --out-dir {params.out_dir}"
        " --samples {input.samples} --categories {input.categories} --context {input.context} --main {params.main}"


rule report:
    input:
        records=bench_outputs(),
        summary=results("tables/summary.csv"),
        samples=results("tables/samples.csv"),
        hedge=results("tables/hedgespec.csv"),
        categories=results("tables/categories.csv"),
        context=results("tables/context_length.csv"),
        figures=expand(results("figures/{name}.png"), name=FIGURE_NAMES),
        metrics=training_metrics(),
    output:
        results("report.md"),
    params:
        figures=results("figures"),
        main=main_variants(),
        compare=",".join(f"{variant}={against}" for variant, against in config.get("report", {}).get("compare", {}).items()
                         if variant in variant_names() and against in variant_names()),
    resources:
        mem_mb=2000,
        runtime=5,
    shell:
        "python -m harness report {input.records} --summary {input.summary} --figures {params.figures}"
        " --metrics {input.metrics} --samples {input.samples} --hedge {input.hedge} --categories {input.categories} --main {params.main}"
        " --context {input.context} --compare '{params.compare}' --out {output}"


rule export_specbench:
    # Spec-Bench's answer-file layout: specbench/<dataset>-t<T>/model_answer/<variant>.jsonl (+ .ar.jsonl)
    input:
        bench_outputs(),
    output:
        directory(results("specbench")),
    resources:
        mem_mb=1000,
        runtime=5,
    shell:
        "python -m harness export-specbench {input} --out-dir {output}"
