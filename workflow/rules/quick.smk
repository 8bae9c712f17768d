# The quick GPU check (workflow/config/gpu-quick.yaml; entry: bash workflow/scripts/gpu_quick.sh), in four stages
# that the entry script runs in turn, each with the time the earlier ones left (docs/gpu.md#the-quick-check):
#   quick_timed:    the zoo's training, then alone on the GPU the timed paired runs (ar_control first), their summary
#                   and report, `measure bare-loop` on the trained target and `measure dispatch`;
#   quick_engine:   `measure engine-efficiency` at Llama-3.1-8B's shape (random weights, an oracle fixing tau), with
#                   a deadline of its own;
#   quick_lossless: every catalog method's float32 greedy lossless run and its table;
#   quick_cuda:     the CUDA tests, with whatever time is left.
# `quick` is all four. Each stage writes into results_dir as it finishes; the entry script writes the folder's
# README.md before and after.


rule cuda_tests:
    # always succeeds: a failing CUDA test is a finding for the README, not a reason to lose the other stages; -v
    # writes each test's verdict as it comes, so a stage stopped at the window's end still says what passed
    output:
        check_path("pytest_cuda.txt"),
    params:
        arguments=QUICK.get("cuda_tests", "-m cuda"),
    resources:
        mem_mb=8000,
        runtime=30,
        gpu=gpus_per_job(timed=True),
    shell:
        "set +e; python -m pytest {params.arguments} -v -p no:cacheprovider > {output}.partial 2>&1;"
        " echo \"exit status $?\" >> {output}.partial; mv {output}.partial {output}"


rule quick_bare_loop:
    # our ar against the engine's floor (one replayed graph per token) and a plain eager loop, on the trained target;
    # after the timed runs (it holds the GPU, and the timed table comes first)
    input:
        target=target_model(),
        timed=bench_outputs(),
    output:
        check_path("bare_loop.txt"),
    params:
        arguments=QUICK.get("bare_loop", "--trials 4 --prompt-tokens 128 --new-tokens 128"),
        device=config["bench"].get("device", "cpu"),
        dtype=config["bench"].get("dtype", "float32"),
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=8000,
        runtime=10,
        gpu=gpus_per_job(timed=True),
    shell:
        "python -m harness measure bare-loop --model {input.target} --device {params.device} --dtype {params.dtype}"
        " --threads {threads} {params.arguments} > {output}.partial 2>&1 && mv {output}.partial {output}"


rule quick_dispatch:
    # ATen ops per decoding step outside graphs, by phase, per method; on a GPU also the profiler's kernel launches
    # against graph launches (random models: the counts depend on the shapes drafted, not on what was learned); after
    # the timed runs and the bare loop
    input:
        timed=bench_outputs(),
        bare_loop=check_path("bare_loop.txt"),
    output:
        table=check_path("dispatch.csv"),
        log=check_path("dispatch.txt"),
    params:
        arguments=QUICK.get("dispatch", "--new-tokens 48"),
        device=config["bench"].get("device", "cpu"),
        dtype=config["bench"].get("dtype", "float32"),
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=8000,
        runtime=10,
        gpu=gpus_per_job(timed=True),
    shell:
        "python -m harness measure dispatch --device {params.device} --dtype {params.dtype} {params.arguments}"
        " --out {output.table} > {output.log} 2>&1"


rule quick_engine_efficiency:
    # each method's measured speedup over ar against the speedup its measured forwards predict, at tau 2-6, on random
    # models of real shapes (no zoo: it needs no trained model); the table is rewritten after every trial and the
    # measurement stops at its own --deadline, so the stage ends with what it measured
    output:
        table=check_path("engine_efficiency.csv"),
        log=check_path("engine_efficiency.txt"),
    params:
        arguments=QUICK.get("engine_efficiency", "--shape llama-3.1-8b --trials 2 --new-tokens 96 --deadline 150"),
        device=config["bench"].get("device", "cpu"),
        dtype=config["bench"].get("dtype", "float32"),
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=8000,
        runtime=10,
        gpu=gpus_per_job(timed=True),
    shell:
        "python -m harness measure engine-efficiency --device {params.device} --dtype {params.dtype}"
        " --threads {threads} {params.arguments} --out {output.table} > {output.log} 2>&1"


rule quick_timed:
    input:
        results("tables/summary.csv"),
        results("report.md"),
        check_path("bare_loop.txt"),
        check_path("dispatch.csv"),


rule quick_engine:
    input:
        check_path("engine_efficiency.csv"),


rule quick_lossless:
    input:
        check_path("lossless.csv"),


rule quick_cuda:
    input:
        check_path("pytest_cuda.txt"),


rule quick:
    input:
        rules.quick_timed.input,
        rules.quick_engine.input,
        rules.quick_lossless.input,
        rules.quick_cuda.input,
