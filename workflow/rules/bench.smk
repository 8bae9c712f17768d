# Benchmarks: every variant x dataset x temperature, each paired prompt by prompt with `ar`.
#
# bench.methods maps a variant name to its options; the key `method` names the
# registered method (default: the variant name itself), so one method can run
# under several configurations (tree_sd with SpecInfer and Sequoia trees, say).
# tree_file: auto stands for the Sequoia tree the workflow searched for that temperature, with
# the budget in tree_budget (auto: the one maximising estimated tokens/s on this machine).

NEEDS_DRAFT_LM = plan.NEEDS_DRAFT_LM
NEEDS_DRAFTER = plan.NEEDS_DRAFTER


def variant_method(variant):
    return plan.variant_method(config, variant)


def variant_drafter(variant):
    return plan.variant_drafter(config, variant)


def is_ablation(variant):
    return plan.is_ablation(config, variant)


def variants_of(method, ablation=False):
    return [variant for variant in method_names()
            if variant_method(variant) == method and is_ablation(variant) == ablation]


def variant_options(variant, temperature):
    return plan.variant_options(config, variant, temperature, WORK)


def bench_outputs(variants=None):
    """Raw records of the given variants (default: all): ablations on bench.ablation_datasets."""
    outputs = []
    for variant in method_names() if variants is None else variants:
        outputs += expand(results("raw/{variant}/{dataset}-t{temperature}.jsonl"), variant=variant,
                          dataset=plan.variant_datasets(config, variant), temperature=temperatures())
    return outputs


def bench_inputs(wildcards):
    inputs = {"target": target_model()}
    if variant_method(wildcards.variant) in NEEDS_DRAFT_LM:
        inputs["draft"] = draft_model()
    method = variant_method(wildcards.variant)
    if method in NEEDS_DRAFTER:
        inputs["drafter"] = drafter_dir(variant_drafter(wildcards.variant))
    if wildcards.dataset == "stdlib_code":
        inputs["prompts"] = work("prompts/stdlib_code.jsonl")
    tree_file = variant_options(wildcards.variant, wildcards.temperature).get("tree_file")
    if tree_file:
        inputs["tree"] = tree_file
    return inputs


def bench_arguments(wildcards, input):
    arguments = plan.run_arguments(config, wildcards.variant, wildcards.dataset, wildcards.temperature, WORK,
                                   input.target, input.get("draft"), input.get("drafter"))
    return shlex.join(arguments)


rule bench:
    input:
        unpack(bench_inputs),
    output:
        results("raw/{variant}/{dataset}-t{temperature}.jsonl"),
    params:
        arguments=bench_arguments,
    wildcard_constraints:
        variant="|".join(method_names()),
        temperature=r"[0-9.]+",
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=gpus_per_job(),
    shell:
        "python -m harness run {params.arguments} --threads {threads} --no-progress --out {output}"


rule bench_ar:
    input:
        bench_outputs(variants_of("ar")),


rule bench_sd:
    input:
        bench_outputs(variants_of("sd")),


rule bench_tree_sd:
    input:
        bench_outputs(variants_of("tree_sd")),


rule bench_lyanna:
    input:
        bench_outputs(variants_of("lyanna")),


rule bench_eagle:
    input:
        bench_outputs(variants_of("eagle")),


# ablate_<method>: the method's ablation and budget-sweep variants (ablate_lyanna: the paper's switches)
for _method in sorted({variant_method(variant) for variant in method_names()}):

    rule:
        name:
            f"ablate_{_method}"
        input:
            bench_outputs(variants_of(_method, ablation=True)),
