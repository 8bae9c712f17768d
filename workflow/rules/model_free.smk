# What the model-free methods draft from: stand's data-driven static tree (its large start shape run on
# calibration prompts cut from the training split, apart from the benchmark's held-out prompts, and pruned
# to the most accepted nodes) and reader's retrieval datastore (a suffix array over the training split).

STATIC_TREE = config.get("static_tree", {})


# (an imported chat target has its calibration split of chat questions instead: rule chat_prompts, rules/real.smk)
if not imported_target():

    rule calibration_prompts:
        input:
            work("data/corpus/train.jsonl"),
        output:
            work("prompts/calibration.jsonl"),
        params:
            prompts=STATIC_TREE.get("prompts", 16),
            lines=config["prompts"].get("code_prompt_lines", 12),
            seed=STATIC_TREE.get("seed", 0) + 1,
        resources:
            mem_mb=1000,
            runtime=5,
        script:
            "../scripts/make_code_prompts.py"


rule stand_tree:
    input:
        target=target_model(),
        prompts=calibration_prompts(),
    output:
        work("tree/stand-t{temperature}-n{nodes}.json"),
    log:
        work("logs/stand_tree-t{temperature}-n{nodes}.log"),
    wildcard_constraints:
        nodes=r"[0-9]+",
    params:
        branching=",".join(str(width) for width in STATIC_TREE.get("start_branching", [6, 3, 2, 2, 1, 1, 1, 1, 1, 1])),
        new_tokens=STATIC_TREE.get("max_new_tokens", 96),
        device=compute_device(),
        dtype=config["bench"].get("dtype", "float32"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
        gpu=gpus_per_job(),
    shell:
        "python -m harness measure static-tree --method stand --target {input.target} --prompts {input.prompts}"
        " --opt branching={params.branching} --opt keep_store=prompt --nodes {wildcards.nodes}"
        " --temperature {wildcards.temperature} --max-new-tokens {params.new_tokens} --device {params.device}"
        " --dtype {params.dtype} --threads {threads} --no-progress --out {output} > {log} 2>&1"


rule reader_datastore:
    input:
        train_tokens(),
    output:
        work(plan.DATASTORE_FILE),
    log:
        work("logs/reader_datastore.log"),
    params:
        key_len=config.get("datastore", {}).get("key_len", 4),
    resources:
        mem_mb=4000,
        runtime=10,
    shell:
        "python -m harness build-datastore --source {input} --key-len {params.key_len} --out {output} > {log} 2>&1"
