# Checks (target `checks`): correctness and overhead measurements on the bench device, each a rule with its
# log and benchmark file, outputs under results/checks/. On a GPU box: `--profile workflow/profiles/gpu`.
#
#   lossless        every main method in float32 at T=0, paired with ar: any differing output fails the rule
#   divergence      how often the benchmark's own greedy outputs (bench.dtype) leave their paired ar output
#   ar_vs_generate  our ar against model.generate() on the target, per engine setting (checks.ar_vs_generate)
#   overheads       each overhead switch against its absence, every method, interleaved
#   host_sync       host synchronisations per decoding step (static KV cache)
#   projection      latencies at Llama-3.1-8B shapes (scaled by checks.projection.scale) and projected speedups
#   verifiers       every verifier on the same trees, for each traversal variant (expected accepted drafts per step)
#   pass summaries  the main variants' benchmark under each engine pass (bench.passes): tables/summary_<pass>.csv
from types import SimpleNamespace

CHECKS = config.get("checks", {})
CHECK_DIR = "checks"
GENERATE_SETTINGS = {"eager": ["--engine", "kv_cache=dynamic", "--engine", "cuda_graphs=off"],
                     "static": ["--engine", "kv_cache=static", "--engine", "cuda_graphs=off"],
                     "graphs": ["--engine", "kv_cache=static", "--engine", "cuda_graphs=on"]}


def check_path(path):
    return results(f"{CHECK_DIR}/{path}")


def lossless_variants():
    """checks.lossless_variants, or every main variant but ar (the reference it is paired with)."""
    if "lossless_variants" in CHECKS:
        return list(CHECKS["lossless_variants"])
    return [variant for variant in plan.main_variants(config) if variant_method(variant) != "ar"]


def lossless_config():
    """The config of the float32 lossless runs: float32, checks.prompts prompts, checks.new_tokens tokens."""
    bench = {**config["bench"], "dtype": "float32", "limit": CHECKS.get("prompts", 6),
             "max_new_tokens": CHECKS.get("new_tokens", 128)}
    return {**config, "bench": bench}


def lossless_job(wildcards):
    """The lossless run of a variant: its first dataset, greedy."""
    return SimpleNamespace(variant=wildcards.variant, dataset=plan.variant_datasets(config, wildcards.variant)[0],
                           temperature="0")


def lossless_arguments(wildcards, input):
    job = lossless_job(wildcards)
    return shlex.join(jobs.run_arguments(lossless_config(), job.variant, job.dataset, job.temperature, WORK,
                                         input.target, input.get("draft"), input.get("drafter")))


def model_arguments():
    return ["--device", compute_device(), "--dtype", config["bench"].get("dtype", "float32")]


def check_dataset():
    """The prompt set the overhead measurement runs on (checks.dataset; default the last bench dataset)."""
    return CHECKS.get("dataset", config["bench"]["datasets"][-1])


def measured_variants():
    """The variants the overhead and host-sync checks measure: the main comparison's (every catalog method's main
    variant; `ar` once, the A/A control aside), at T=0."""
    return [variant for variant in plan.main_variants(config) if variant_method(variant) != "ar" or variant == "ar"]


def measured_models():
    """--target, --draft and one --variant per measured variant (method, options, drafter)."""
    arguments = ["--target", target_model()]
    if any(plan.needs_draft_lm(variant_method(variant)) for variant in measured_variants()):
        arguments += ["--draft", draft_model()]
    return arguments + jobs.check_variant_arguments(config, measured_variants(), "0", WORK)


def measured_inputs():
    """What the measured variants read: the models, drafters and the files the workflow builds for their options
    (trees, shapes, datastores), as their bench jobs on the check dataset at T=0 would."""
    jobs_ = [SimpleNamespace(variant=variant, dataset=check_dataset(), temperature="0") for variant in measured_variants()]
    return sorted({value for job in jobs_ for value in flat_inputs(bench_inputs(job))})


def flat_inputs(inputs):
    return [item for value in inputs.values() for item in (value if isinstance(value, list) else [value])]


def greedy_records():
    return [path for path in bench_outputs() if path.endswith("-t0.jsonl")]


rule lossless_run:
    input:
        unpack(lambda wildcards: bench_inputs(lossless_job(wildcards))),
    output:
        check_path("lossless/{variant}.jsonl"),
    params:
        arguments=lossless_arguments,
    wildcard_constraints:
        variant="|".join(lossless_variants()) or "^$",
    log:
        check_path("logs/lossless_{variant}.log"),
    benchmark:
        check_path("benchmarks/lossless_{variant}.tsv")
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=gpus_per_job(),
    shell:
        "python -m harness run {params.arguments} --threads {threads} --no-progress --out {output} > {log} 2>&1"


def verifier_job(wildcards):
    dataset = plan.variant_datasets(config, wildcards.variant)[-1]
    return SimpleNamespace(variant=wildcards.variant, dataset=dataset, temperature="1")


def verifier_arguments(wildcards, input):
    job = verifier_job(wildcards)
    return shlex.join(jobs.verifier_check_arguments(config, job.variant, job.dataset, WORK, input.target,
                                                    input.get("draft"), input.get("drafter")))


rule verifier_acceptance:
    input:
        unpack(lambda wildcards: bench_inputs(verifier_job(wildcards))),
    output:
        check_path("verifiers/{variant}.csv"),
    params:
        arguments=verifier_arguments,
    wildcard_constraints:
        variant="|".join(plan.traversal_variants(config)) or "^$",
    log:
        check_path("logs/verifiers_{variant}.log"),
    benchmark:
        check_path("benchmarks/verifiers_{variant}.tsv")
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=gpus_per_job(),
    shell:
        "python -m harness measure verifiers {params.arguments} --threads {threads} --no-progress --out {output}"
        " > {log} 2>&1"


rule lossless:
    input:
        expand(check_path("lossless/{variant}.jsonl"), variant=lossless_variants()),
    output:
        check_path("lossless.csv"),
    log:
        check_path("logs/lossless.log"),
    benchmark:
        check_path("benchmarks/lossless.tsv")
    resources:
        mem_mb=2000,
        runtime=5,
    shell:
        "python -m harness divergence {input} --expect-identical --out {output} > {log} 2>&1"


rule divergence:
    input:
        greedy_records(),
    output:
        check_path("divergence.csv"),
    log:
        check_path("logs/divergence.log"),
    benchmark:
        check_path("benchmarks/divergence.tsv")
    resources:
        mem_mb=2000,
        runtime=5,
    shell:
        "python -m harness divergence {input} --out {output} > {log} 2>&1"


rule ar_vs_generate:
    input:
        target=target_model(),
    output:
        check_path("ar_vs_generate_{setting}.txt"),
    params:
        arguments=lambda wildcards: shlex.join([
            *model_arguments(), "--trials", str(CHECKS.get("prompts", 6)),
            "--new-tokens", str(CHECKS.get("new_tokens", 128)), *GENERATE_SETTINGS[wildcards.setting]]),
    wildcard_constraints:
        setting="|".join(GENERATE_SETTINGS),
    log:
        check_path("logs/ar_vs_generate_{setting}.log"),
    benchmark:
        check_path("benchmarks/ar_vs_generate_{setting}.tsv")
    threads: config["threads"]
    resources:
        mem_mb=8000,
        runtime=30,
        gpu=gpus_per_job(timed=True),
    shell:
        "python -m harness measure ar-vs-generate --model {input.target} {params.arguments} > {output}.partial"
        " 2> {log} && mv {output}.partial {output}"


rule overheads:
    input:
        measured_inputs(),
        prompts=[dataset_prompts(check_dataset())] if check_dataset() == "stdlib_code" else [],
    output:
        check_path("overheads.csv"),
    params:
        arguments=shlex.join([
            *measured_models(), *model_arguments(), "--limit", str(CHECKS.get("prompts", 6)),
            "--max-new-tokens", str(CHECKS.get("new_tokens", 128)),
            *(["--settings", CHECKS["overhead_settings"]] if CHECKS.get("overhead_settings") else [])]),
        prompts=dataset_prompts(check_dataset()),
    log:
        check_path("logs/overheads.log"),
    benchmark:
        check_path("benchmarks/overheads.tsv")
    threads: config["threads"]
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=gpus_per_job(timed=True),
    shell:
        "python -m harness measure overheads {params.arguments} --prompts {params.prompts} --threads {threads}"
        " --no-progress --out {output} > {log} 2>&1"


rule host_sync:
    input:
        measured_inputs(),
    output:
        check_path("host_sync.csv"),
    params:
        arguments=shlex.join([*measured_models(), *model_arguments(), "--kv-cache", "static",
                              "--max-new-tokens", str(min(CHECKS.get("new_tokens", 128), 64))]),
    log:
        check_path("logs/host_sync.log"),
    benchmark:
        check_path("benchmarks/host_sync.tsv")
    threads: config["threads"]
    resources:
        mem_mb=8000,
        runtime=30,
        gpu=gpus_per_job(),
    shell:
        "python -m harness measure host-sync {params.arguments} --out {output} > {log} 2>&1"


rule projection:
    input:
        summary=results("tables/summary.csv"),
    output:
        latency=check_path("projection/latency.csv"),
        projection=check_path("projection/projection.csv"),
    params:
        out_dir=check_path("projection"),
        arguments=shlex.join([
            *model_arguments(), *(f"--{key}={value}" for key, value in CHECKS.get("projection", {}).items())]),
    log:
        check_path("logs/projection.log"),
    benchmark:
        check_path("benchmarks/projection.tsv")
    threads: config["threads"]
    resources:
        mem_mb=16000,
        runtime=30,
        gpu=gpus_per_job(timed=True),
    shell:
        "python -m harness measure project-8b --summary {input.summary} --out-dir {params.out_dir} {params.arguments}"
        " --threads {threads} > {log} 2>&1"


if engine_passes():

    rule pass_summary:
        input:
            lambda wildcards: bench_outputs(plan.main_variants(config), engine_pass=wildcards["pass"]),
        output:
            results("tables/summary_{pass,%s}.csv" % "|".join(engine_passes())),
        log:
            check_path("logs/summary_{pass}.log"),
        resources:
            mem_mb=2000,
            runtime=5,
        shell:
            "python -m harness summarize {input} --out {output} > {log} 2>&1"


rule checks:
    input:
        check_path("lossless.csv") if lossless_variants() else [],
        check_path("divergence.csv") if greedy_records() else [],
        expand(check_path("ar_vs_generate_{setting}.txt"), setting=CHECKS.get("ar_vs_generate", ["eager", "static"])),
        check_path("overheads.csv"),
        check_path("host_sync.csv"),
        check_path("projection/projection.csv"),
        expand(check_path("verifiers/{variant}.csv"), variant=plan.traversal_variants(config)),
        expand(results("tables/summary_{pass}.csv"), **{"pass": engine_passes()}),
