# Aggregation, figures, report and the Spec-Bench export, all from the raw records of every bench job. The tables,
# figures and report sections are the views of harness/analysis/views.py (and of methods/<name>/view.py): which of
# them apply to a report is decided here from its variants and prompt sets, so a figure with no data is neither a
# target nor drawn nor embedded; every figure that applies is its own target (rule figure: results/figures/<name>.pdf).

from harness.analysis import view as report_view, views as report_views

# Two reports: the main comparison's (target `all`: results/tables, figures, report.md) over the variants in no
# study, and the studies' (target `studies`: results/studies/...) over every variant, the main ones included, but
# the learning curves' chain runs (drafter_studies.smk's CURVE_VARIANTS: their table is the learning curves').
# The main report also reads the runs its paper's-claims table needs (methods/lyanna/claims.py): study `claims`
# (lyanna and eagle at one deep shape) and the seeds study's lyanna and eagle (each verdict per seed): rows beside
# the main ones, not main rows; and, when present, the second zoo's runs (<variant>_target<s>, zoo_seed.smk: each
# verdict per target seed). The studies report reads those always.
CLAIM_VARIANTS = plan.study_variants(config, "claims") + [
    variant for variant in plan.study_variants(config, "seeds") if variant_method(variant) in ("lyanna", "eagle")]
MAIN_RECORDS = bench_outputs(plan.main_variants(config) + CLAIM_VARIANTS)  # the main report's raw records
# rule records: the same files gzip-compressed, committed (`python -m harness claims` re-derives the tables from them)
PUBLISHED_RECORDS = [path.replace(results("raw/"), results("records/"), 1) + ".gz" for path in MAIN_RECORDS]
SCOPE_DIRS = {"main": "", "studies": "studies/"}  # each report's folder under results/


def scope_variants(scope):
    if scope == "main":
        return plan.main_variants(config) + CLAIM_VARIANTS
    return [variant for variant in variant_names() if variant not in CURVE_VARIANTS]


def scope_main(scope):
    """The variants the scope's report and figures treat as run on every dataset (the rest: ablations)."""
    chosen = set(scope_variants(scope))
    main = plan.main_variants(config) if scope == "main" else plan.every_dataset_variants(config)
    return ",".join(variant for variant in main if variant in chosen)


def training_metrics(scope):
    """Metrics files of the models and drafters the scope's variants used that the workflow trained."""
    variants = scope_variants(scope)
    paths = [] if external_models() else [work("metrics/target.json")]
    if not external_models() and any(plan.needs_draft_lm(variant_method(variant)) for variant in variants):
        paths.append(work("metrics/draft.json"))  # no draft LM is trained for a run that drafts without one
    used = {variant_drafter(variant) for variant in variants if plan.needs_drafter(variant_method(variant))}
    return paths + [work(f"metrics/drafter-{name}.json") for name in trained_drafters() if name in used]


def scope_compare(scope):
    chosen = scope_variants(scope)
    return ",".join(f"{variant}={against}" for variant, against in config.get("report", {}).get("compare", {}).items()
                    if variant in chosen and against in chosen)


def scope_published(scope):
    """``report.published`` for the scope's variants, as one shell-quoted JSON argument."""
    chosen = scope_variants(scope)
    entries = {variant: figures for variant, figures in config.get("report", {}).get("published", {}).items()
               if variant in chosen}
    return shlex.quote(json.dumps(entries))


def report_scope(scope):
    """The scope's variants and prompt sets, as the views decide on them (harness.analysis.view.Scope)."""
    main = set(scope_main(scope).split(","))
    variants = tuple(report_view.Planned(variant, variant_method(variant), variant in main,
                                         tuple(plan.variant_datasets(config, variant)),
                                         plan.variant_settings(config, variant))
                     for variant in scope_variants(scope))
    datasets = dict.fromkeys(dataset for variant in variants for dataset in variant.datasets)
    return report_view.Scope(variants, {dataset: prompt_sets.planned_categories(config, dataset, dataset_selection(dataset))
                                        for dataset in datasets})


FIGURE_NAMES = {scope: report_views.figure_names(report_scope(scope)) for scope in SCOPE_DIRS}
# rule studies_records: the studies report's records beyond the main report's, published the same way (with
# results/records they re-derive the studies' tables: its claims rows read lyanna's ablations)
STUDIES_PUBLISHED_RECORDS = [path.replace(results("raw/"), results("studies/records/"), 1) + ".gz"
                             for path in bench_outputs(scope_variants("studies")) if path not in MAIN_RECORDS]


def scope_tables(scope):
    """The tables `summarize --tables-dir` writes for a scope: the summary and every view's."""
    names = [report_view.SUMMARY, *report_views.table_names()]
    return [results(f"{SCOPE_DIRS[scope]}tables/{name}.csv") for name in names]


def scope_figures(scope):
    return expand(results(f"{SCOPE_DIRS[scope]}figures/{{name}}.png"), name=FIGURE_NAMES[scope])


rule summary:
    input:
        MAIN_RECORDS,
        lambda wildcards: present_target_seed_records(),
    output:
        scope_tables("main"),
    params:
        tables=results("tables"),
    resources:
        mem_mb=2000,
        runtime=5,
    shell:
        "python -m harness summarize {input} --tables-dir {params.tables}"


rule figure:
    # one figure of the main report: the views that apply to it (FIGURE_NAMES), each drawn alone
    input:
        scope_tables("main"),
    output:
        pdf=results("figures/{name}.pdf"),
        png=results("figures/{name}.png"),
    wildcard_constraints:
        name="|".join(FIGURE_NAMES["main"]),
    params:
        tables=results("tables"),
        out_dir=results("figures"),
        main=scope_main("main"),
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "python -m harness figures --tables {params.tables} --out-dir {params.out_dir} --main {params.main}"
        " --only {wildcards.name}"


rule report:
    input:
        records=lambda wildcards: MAIN_RECORDS + present_target_seed_records(),
        tables=scope_tables("main"),
        figures=scope_figures("main"),
        metrics=training_metrics("main"),
        # the regime card lists each learning-curve rung at its own calibrated shape (studies/tables beside tables/)
        curves=rules.learning_curves.output.table if LEARNING_CURVES.get("calibrated") else [],
    output:
        results("report.md"),
    params:
        tables=results("tables"),
        figures=results("figures"),
        main=scope_main("main"),
        compare=scope_compare("main"),
        published=scope_published("main"),
    resources:
        mem_mb=2000,
        runtime=5,
    shell:
        "python -m harness report {input.records} --tables {params.tables} --figures {params.figures}"
        " --metrics {input.metrics} --main {params.main} --compare '{params.compare}'"
        " --published {params.published} --out {output}"


rule records:
    # the published records (harness/analysis/published.py): one raw records file of the main report, gzip-compressed
    # without a name or timestamp (the same bytes from the same records)
    input:
        results("raw/{variant}/{name}.jsonl"),
    output:
        results("records/{variant}/{name}.jsonl.gz"),
    resources:
        mem_mb=200,
        runtime=1,
    shell:
        "gzip -9 -n -c {input} > {output}"


use rule records as studies_records with:
    output:
        results("studies/records/{variant}/{name}.jsonl.gz"),


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
use rule summary as studies_summary with:
    input:
        bench_outputs(scope_variants("studies")),
        TARGET_SEED_RECORDS,
    output:
        scope_tables("studies"),
    params:
        tables=results("studies/tables"),


use rule figure as studies_figure with:
    input:
        scope_tables("studies"),
    output:
        pdf=results("studies/figures/{name}.pdf"),
        png=results("studies/figures/{name}.png"),
    wildcard_constraints:
        name="|".join(FIGURE_NAMES["studies"]),
    params:
        tables=results("studies/tables"),
        out_dir=results("studies/figures"),
        main=scope_main("studies"),


def drafter_study_outputs():
    """The drafter studies' tables and figure the studies report shows (drafter_studies.smk's rules, where configured)."""
    curves = [results(f"studies/{name}") for name in ("tables/learning_curves.csv",
                                                      "tables/learning_curves_stability.csv",
                                                      "tables/learning_curves_fit.csv",
                                                      "figures/learning_curves.png")]
    return ((curves if LEARNING_CURVES else []) + ([results("studies/tables/lr.csv")] if LR_STUDY else [])
            + ([results("studies/tables/dump_precision.csv")] if DUMP_PRECISION else []))


use rule report as studies_report with:
    input:
        records=bench_outputs(scope_variants("studies")) + TARGET_SEED_RECORDS,
        tables=scope_tables("studies"),
        figures=scope_figures("studies"),
        metrics=training_metrics("studies"),
        drafter_studies=drafter_study_outputs(),  # learning curves, their stability, the lr and dump studies (its section)
    output:
        results("studies/report.md"),
    params:
        tables=results("studies/tables"),
        figures=results("studies/figures"),
        main=scope_main("studies"),
        compare=scope_compare("studies"),
        published=scope_published("studies"),


# study `drafting` (issue 79): each family's chain at T > 0 by top-k and by sampled drafts; rule drafting_table pairs
# them (harness/analysis/drafting.py) beside the main variants' runs on the same sets and temperatures (the convention
# each one's calibration chose): results/studies/tables/drafting.csv, and the runs' records published under
# studies/records, without the whole studies report
DRAFTING = plan.study_variants(config, "drafting")


def drafting_records(wildcards):
    own = bench_outputs(DRAFTING)
    methods = {variant_method(variant) for variant in DRAFTING}
    return own + bench_outputs_named([variant for variant in plan.main_variants(config) if variant in methods],
                                     {Path(path).name for path in own})


if DRAFTING:
    OWN_STUDY_RULES.add("drafting")

    rule drafting_table:
        input:
            drafting_records,
        output:
            results("studies/tables/drafting.csv"),
        localrule: True
        resources:
            mem_mb=2000,
            runtime=10,
        shell:
            "python -m harness drafting-table {input} --out {output}"

    rule study_drafting:
        input:
            bench_outputs(DRAFTING),
            [path for path in STUDIES_PUBLISHED_RECORDS if any(f"/studies/records/{variant}/" in path
                                                               for variant in DRAFTING)],
            rules.drafting_table.output,


rule studies:
    # every study's runs (and the main comparison's, which they are read beside), the studies' report
    input:
        zoo_outputs(),
        bench_outputs(),
        results("studies/report.md"),
        STUDIES_PUBLISHED_RECORDS,
        rules.zoo_seed.input if ZOO_SEED_CONFIG else [],  # the second zoo (zoo_seed.smk)
        lambda wildcards: list(rules.load.input),  # the load sweep and its projection (load.smk, included after)
        rules.learning_curves.output if LEARNING_CURVES else [],
        rules.lr_study.output if LR_STUDY else [],
        rules.dump_precision.output if DUMP_PRECISION else [],
        rules.drafting_table.output if DRAFTING else [],


# study_<name>: one study's runs (a study whose rule a rules file defines keeps it: drafter_studies.smk's)
for _study in plan.study_names(config):
    if _study in OWN_STUDY_RULES:
        continue

    rule:
        name:
            f"study_{_study}"
        input:
            bench_outputs(plan.study_variants(config, _study)),
