# Sequoia's static tree for tree_sd: per-rank acceptance and latencies measured on this
# machine for this draft/target pair, then the dynamic-programming tree search, either
# with the budget that maximises estimated tokens/s (b auto) or with a fixed budget (b N).


rule measure_acceptance:
    input:
        target=target_model(),
        draft=draft_model(),
        heldout=work("data/tokens/heldout.pt"),
    output:
        work("tree/acceptance-t{temperature}.json"),
    params:
        tree=config["tree_search"],
    threads: config["threads"]
    resources:
        mem_mb=4000,
        runtime=20,
    script:
        "../scripts/measure_acceptance.py"


# Latencies decide tree sizes, so they are measured alone (the rule takes every core: no other job runs beside
# it) with the bench jobs' torch threads (bench.threads).
rule measure_latency:
    input:
        target=target_model(),
    output:
        work("tree/latency.json"),
    params:
        tree=config["tree_search"],
        device=config["bench"].get("device", "cpu"),
        dtype=config["bench"].get("dtype", "float32"),
        torch_threads=config["bench"].get("threads", config["threads"]),
    priority: 50  # all cores: first when the target frees them, not after every drafter (a 3-min tail)
    threads: all_cores()
    resources:
        mem_mb=4000,
        runtime=20,
        gpu=gpus_per_job(timed=True),
    script:
        "../scripts/measure_latency.py"


rule measure_draft_step:
    input:
        draft=draft_model(),
    output:
        work("tree/draft-step.json"),
    params:
        tree=config["tree_search"],
        device=config["bench"].get("device", "cpu"),
        dtype=config["bench"].get("dtype", "float32"),
        torch_threads=config["bench"].get("threads", config["threads"]),
    priority: 50  # all cores, as measure_latency
    threads: all_cores()
    resources:
        mem_mb=4000,
        runtime=10,
        gpu=gpus_per_job(timed=True),
    script:
        "../scripts/measure_draft_step.py"


rule sequoia_tree:
    input:
        acceptance=work("tree/acceptance-t{temperature}.json"),
        latency=work("tree/latency.json"),
        draft_step=work("tree/draft-step.json"),
    output:
        work("tree/sequoia-t{temperature}-b{budget}.json"),
    wildcard_constraints:
        budget=r"auto|[0-9]+",
    params:
        tree=config["tree_search"],
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/sequoia_tree.py"


# budget: auto for every beam drafter (eagle, lyanna, prism, owl: options extending BeamOptions): the depth and budget
# of highest estimated tokens/s, from a calibration run of the method at its largest shape (accepted nodes by depth
# and rank) and the latencies above.
rule tree_shape:
    input:
        target=target_model(),
        drafter=lambda wildcards: drafter_dir(wildcards.drafter),
        prompts=calibration_prompts(),
        latency=work("tree/latency.json"),
    output:
        work("tree/shape-{method}-{drafter}-t{temperature}.json"),
    wildcard_constraints:
        method="|".join(beam_methods()),
        temperature=r"[0-9.]+",
    params:
        arguments=lambda wildcards, input: shlex.join(jobs.tree_shape_arguments(
            config, wildcards.method, wildcards.drafter, wildcards.temperature, WORK, input.target, input.drafter,
            input.prompts, input.latency)),
    priority: 10  # a finished drafter's calibration before the queued bench runs, so its own can fill
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=4000,
        runtime=20,
        gpu=gpus_per_job(),
    shell:
        "python -m harness measure tree-shape {params.arguments} --threads {threads} --no-progress --out {output}"


# gamma: auto (sd) and k: auto (pard), every chain drafter with a tunable length (options extending ChainOptions):
# the length of highest estimated tokens/s, from a calibration run at the longest chain (accepted drafts per step)
# and the latencies above, by the tree shape's rule (the shortest within 3% of the best).
rule chain_length:
    input:
        target=target_model(),
        model=lambda wildcards: draft_model() if wildcards.drafter == jobs.DRAFT_LM else drafter_dir(wildcards.drafter),
        prompts=calibration_prompts(),
        latency=work("tree/latency.json"),
    output:
        work("tree/length-{method}-{drafter}-t{temperature}.json"),
    wildcard_constraints:
        method="|".join(chain_methods()),
        temperature=r"[0-9.]+",
    params:
        arguments=lambda wildcards, input: shlex.join(jobs.chain_length_arguments(
            config, wildcards.method, wildcards.drafter, wildcards.temperature, WORK, input.target, input.model,
            input.prompts, input.latency)),
    priority: 10  # as tree_shape
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=4000,
        runtime=20,
        gpu=gpus_per_job(),
    shell:
        "python -m harness measure chain-length {params.arguments} --threads {threads} --no-progress --out {output}"
