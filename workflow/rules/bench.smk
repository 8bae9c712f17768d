# Benchmarks: every method x dataset x temperature, each paired prompt by prompt with `ar`.


def bench_outputs(methods=None):
    return expand(
        results("raw/{method}/{dataset}-t{temperature}.jsonl"),
        method=methods or method_names(),
        dataset=config["bench"]["datasets"],
        temperature=temperatures(),
    )


def bench_inputs(wildcards):
    inputs = {"target": work("models/target")}
    if wildcards.method in ("sd", "tree_sd"):
        inputs["draft"] = work("models/draft")
    if wildcards.dataset == "stdlib_code":
        inputs["prompts"] = work("prompts/stdlib_code.jsonl")
    return inputs


def bench_arguments(wildcards, input):
    bench = config["bench"]
    arguments = [
        f"--method {wildcards.method}",
        f"--target {input.target}",
        f"--prompts {dataset_prompts(wildcards.dataset)}",
        f"--dataset {wildcards.dataset}",
        f"--temperature {wildcards.temperature}",
        f"--max-new-tokens {bench.get('max_new_tokens', 128)}",
        f"--seed {bench.get('seed', 0)}",
        f"--dtype {bench.get('dtype', 'float32')}",
        f"--device {bench.get('device', 'cpu')}",
        f"--warmup {bench.get('warmup', 1)}",
    ]
    if "draft" in input.keys():
        arguments.append(f"--draft {input.draft}")
    limit = dataset_limit(wildcards.dataset)
    if limit:
        arguments.append(f"--limit {limit}")
    for key, value in config["bench"]["methods"][wildcards.method].items():
        value = ",".join(map(str, value)) if isinstance(value, list) else value
        arguments.append(f"--opt {key}={value}")
    if wildcards.method != "ar":
        arguments.append("--pair-with-ar")
    return " ".join(arguments)


rule bench:
    input:
        unpack(bench_inputs),
    output:
        results("raw/{method}/{dataset}-t{temperature}.jsonl"),
    params:
        arguments=bench_arguments,
    wildcard_constraints:
        method="|".join(method_names()),
        temperature=r"[0-9.]+",
    threads: config["threads"]
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=1 if str(config["bench"].get("device", "cpu")).startswith("cuda") else 0,
    shell:
        "python -m harness run {params.arguments} --threads {threads} --no-progress --out {output}"


rule bench_ar:
    input:
        bench_outputs(["ar"]),


rule bench_sd:
    input:
        bench_outputs(["sd"]),


rule summary:
    input:
        bench_outputs(),
    output:
        results("tables/summary.csv"),
    resources:
        mem_mb=2000,
        runtime=5,
    shell:
        "python -m harness summarize {input} --out {output}"
