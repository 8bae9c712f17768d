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


rule measure_latency:
    input:
        target=target_model(),
        draft=draft_model(),
    output:
        work("tree/latency.json"),
    params:
        tree=config["tree_search"],
        device=config["bench"].get("device", "cpu"),
        dtype=config["bench"].get("dtype", "float32"),
    threads: config["threads"]
    resources:
        mem_mb=4000,
        runtime=20,
        gpu=gpus_per_job(),
    script:
        "../scripts/measure_latency.py"


rule sequoia_tree:
    input:
        acceptance=work("tree/acceptance-t{temperature}.json"),
        latency=work("tree/latency.json"),
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
