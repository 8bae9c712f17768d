# The load study (target `load`, part of `studies`): `ar` (twice: the A/A control) and bench.load_variants (default:
# the main comparison's batched methods) decoded in static batches of each of bench.batch_sizes on the same
# prompts, interleaved batch by batch, at T=0: throughput, paired speedup over ar, E2E and TPOT percentiles, tau,
# verified tokens per step (python -m harness measure load), a budget: auto variant's tree re-chosen per B from the
# target's latency per batch size (rule measure_batch_latency); with bench.load_latency (a measure project-8b latency
# table) its projection to that GPU per batch size (python -m harness measure project-load).

from types import SimpleNamespace

LOAD_SIZES = config["bench"].get("batch_sizes", [])


def load_dataset():
    """The prompts the load study cuts its requests from: the first bench dataset (the default's: HumanEval, 164)."""
    return config["bench"]["datasets"][0]


def load_jobs():
    """Each load variant as its bench job on the load dataset at T=0 (the inputs and options it would have)."""
    return [SimpleNamespace(variant=variant, dataset=load_dataset(), temperature="0")
            for variant in plan.load_variants(config)]


def load_inputs():
    inputs = {"target": target_model(), "batch_latency": work("tree/latency-batch.json")}
    for job in load_jobs():
        inputs.update({f"{job.variant}_{name}": value for name, value in bench_inputs(job).items()})
    if load_dataset() in prompt_sets.BUILT_PROMPT_SETS:
        inputs["prompts"] = work(f"prompts/{load_dataset()}.jsonl")
    return inputs


def load_arguments():
    bench = config["bench"]
    arguments = ["--target", target_model()]
    if any(plan.needs_draft_lm(variant_method(job.variant)) for job in load_jobs()):
        arguments += ["--draft", draft_model()]
    return shlex.join([
        *arguments, *jobs.check_variant_arguments(config, plan.load_variants(config), "0", WORK),
        "--prompts", prompt_sets.dataset_prompts(config, load_dataset(), WORK),
        "--batch-sizes", ",".join(str(size) for size in LOAD_SIZES), "--requests", str(bench.get("load_requests", 16)),
        "--batch-latency", work("tree/latency-batch.json"),
        "--new-tokens", str(bench.get("max_new_tokens", 128)), *model_arguments()])


# Latencies decide tree sizes, so they are measured alone (every core: no other job beside it) with the bench
# jobs' torch threads; the sizes and repeats are tree_search's, the batch sizes the study's.
rule measure_batch_latency:
    input:
        target=target_model(),
    output:
        work("tree/latency-batch.json"),
    params:
        tree=config["tree_search"],
        batch_sizes=LOAD_SIZES,
        device=config["bench"].get("device", "cpu"),
        dtype=config["bench"].get("dtype", "float32"),
        torch_threads=config["bench"].get("threads", config["threads"]),
    threads: all_cores()
    resources:
        mem_mb=4000,
        runtime=20,
        gpu=gpus_per_job(timed=True),
    script:
        "../scripts/measure_batch_latency.py"


rule load_sweep:
    input:
        **load_inputs(),
    output:
        table=results("load/load.csv"),
        figure=results("load/load.pdf"),
        png=results("load/load.png"),
    params:
        arguments=load_arguments(),
    log:
        results("load/load.log"),
    benchmark:
        results("load/benchmark.tsv")
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=gpus_per_job(timed=True),
    shell:
        "python -m harness measure load {params.arguments} --threads {threads} --no-progress --out {output.table}"
        " --figure {output.figure} > {log} 2>&1"


LOAD_LATENCY = config["bench"].get("load_latency")


rule load_projection:
    input:
        load=results("load/load.csv"),
        latency=LOAD_LATENCY or [],
    output:
        table=results("load/projection/projection.csv"),
        figure=results("load/projection/projection.pdf"),
        png=results("load/projection/projection.png"),
    params:
        out_dir=lambda wildcards, output: str(Path(output.table).parent),
        label=f"Llama-3.1-8B shapes, {LOAD_LATENCY}",
    log:
        results("load/projection/projection.log"),
    resources:
        mem_mb=2000,
        runtime=5,
    shell:
        "python -m harness measure project-load --load {input.load} --latency {input.latency} --label {params.label:q}"
        " --out-dir {params.out_dir} > {log} 2>&1"


rule load:
    input:
        results("load/load.csv") if LOAD_SIZES else [],
        results("load/projection/projection.csv") if LOAD_SIZES and LOAD_LATENCY else [],
