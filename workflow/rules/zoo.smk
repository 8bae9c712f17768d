# The default model zoo: corpus -> tokenizer -> token streams -> target -> draft, features, prompts.


def zoo_outputs():
    """What `snakemake zoo` builds: nothing for a config with its own checkpoints (`models:`); the converted target,
    its regime figures and its training data's table for an imported one (`gguf:`)."""
    if external_models():
        return []
    if imported_target():
        return [work("models/target"), work("metrics/target.json"), results("tables/data.csv")]
    return [
        work("models/target"),
        work("models/draft"),
        work("features/target/index.json"),
        work("prompts/stdlib_code.jsonl"),
    ]


def training_minutes(settings):
    """A training job's time limit (SLURM -t): twice its `expected_minutes` plus 30 (default 60 expected)."""
    return 2 * int(settings.get("expected_minutes", 60)) + 30


def corpus_inputs(wildcards):
    return [config["corpus"]["path"]] if config["corpus"].get("source") == "jsonl" else []


rule dump_features:
    input:
        target=target_model(),
        train=train_tokens(),
    output:
        index=work("features/target/index.json"),
    params:
        features=config["features"],
        device=compute_device(),
        dtype=config["bench"].get("dtype", "float32"),
    priority: 40  # seven drafters, the draft LM and polybasic read it
    threads: config["threads"]
    resources:
        mem_mb=8000,
        runtime=30,
        gpu=gpus_per_job(),
    script:
        "../scripts/dump_features.py"


# The corpus and what is cut from it: not for an imported chat target (rules/real.smk makes its training data).
if "corpus" in config:

    rule corpus:
        input:
            corpus_inputs,
        output:
            train=work("data/corpus/train.jsonl"),
            heldout=work("data/corpus/heldout.jsonl"),
            summary=work("data/corpus/corpus.json"),
        params:
            corpus=config["corpus"],
        resources:
            mem_mb=2000,
            runtime=10,
        script:
            "../scripts/build_corpus.py"

    rule tokenize:
        input:
            tokenizer=tokenizer_dir(),
            documents=work("data/corpus/{split}.jsonl"),
        output:
            work("data/tokens/{split}.pt"),
        wildcard_constraints:
            split="train|heldout",
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=20,
        script:
            "../scripts/tokenize_corpus.py"

    rule tokenize_domain:
        # one domain's slice of the training split (config `domains`): what a domain drafter trains on
        input:
            tokenizer=tokenizer_dir(),
            documents=work("data/corpus/train.jsonl"),
        output:
            work("data/tokens/domain-{domain}.pt"),
        params:
            patterns=lambda wildcards: config["domains"][wildcards.domain],
        wildcard_constraints:
            domain="|".join(config.get("domains", {})) or "^$",
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=20,
        script:
            "../scripts/tokenize_corpus.py"

    rule domain_prompts:
        # code prompts from the held-out files of every domain: the mixed-domain prompt set `stdlib_domains`
        input:
            work("data/corpus/heldout.jsonl"),
        output:
            work("prompts/stdlib_domains.jsonl"),
        params:
            prompts=config["prompts"].get("domain_prompts", 5),
            lines=config["prompts"].get("code_prompt_lines", 12),
            seed=config["prompts"].get("seed", 0),
            domains=config.get("domains", {}),
        resources:
            mem_mb=1000,
            runtime=5,
        script:
            "../scripts/make_code_prompts.py"

    rule code_prompts:
        input:
            heldout=work("data/corpus/heldout.jsonl"),
        output:
            work("prompts/stdlib_code.jsonl"),
        params:
            prompts=config["prompts"].get("code_prompts", 20),
            lines=config["prompts"].get("code_prompt_lines", 12),
            seed=config["prompts"].get("seed", 0),
        resources:
            mem_mb=1000,
            runtime=5,
        script:
            "../scripts/make_code_prompts.py"

    rule edit_prompts:
        # successive edits of held-out modules, each answered after the one before: the prompt set `stdlib_edits`
        input:
            heldout=work("data/corpus/heldout.jsonl"),
        output:
            work("prompts/stdlib_edits.jsonl"),
        params:
            modules=config["prompts"].get("edit_modules", 4),
            versions=config["prompts"].get("edit_versions", 4),
            lines=config["prompts"].get("code_prompt_lines", 12),
            seed=config["prompts"].get("seed", 0),
        resources:
            mem_mb=1000,
            runtime=5,
        script:
            "../scripts/make_edit_prompts.py"

    rule long_prompts:
        # whole held-out files (or cuts of them) in buckets of target tokens: the long-context set `stdlib_long`
        input:
            heldout=work("data/corpus/heldout.jsonl"),
            tokenizer=tokenizer_dir(),
        output:
            work("prompts/stdlib_long.jsonl"),
        params:
            buckets=config["prompts"].get("long_buckets"),
            prompts=config["prompts"].get("long_prompts", 4),
            seed=config["prompts"].get("seed", 0),
        resources:
            mem_mb=2000,
            runtime=5,
        script:
            "../scripts/make_long_prompts.py"


rule zoo:
    input:
        zoo_outputs(),


# The zoo's own tokenizer and target: not built for a config with its own checkpoints (`models:`) nor for an
# imported target (`gguf:`, rules/real.smk).
if not external_models() and not imported_target():

    rule tokenizer:
        input:
            train=work("data/corpus/train.jsonl"),
        output:
            directory(work("models/tokenizer")),
        params:
            tokenizer=config["tokenizer"],
        threads: config["threads"]
        resources:
            mem_mb=4000,
            runtime=20,
        script:
            "../scripts/train_tokenizer.py"

    rule train_target:
        input:
            tokenizer=work("models/tokenizer"),
            train=work("data/tokens/train.pt"),
            heldout=work("data/tokens/heldout.pt"),
            corpus=work("data/corpus/corpus.json"),
        output:
            model=directory(work("models/target")),
            metrics=work("metrics/target.json"),
        params:
            role="target",
            model=config["target"],
            evaluation=config["evaluation"],
            checkpoint=work("checkpoints/target.pt"),
            device=compute_device(),
            gates=config.get("gates", {}).get("target", {}),
            allow_weak=config.get("allow_weak_models", False),
        threads: config["target"].get("threads", config["threads"])
        resources:
            mem_mb=8000,
            runtime=training_minutes(config["target"]),
            gpu=gpus_per_job(),
        script:
            "../scripts/train_lm.py"


# The draft LM (sd, tree_sd, polybasic, pard): distilled from the zoo's target or from an imported one.
if not external_models():

    rule train_draft:
        input:
            tokenizer=tokenizer_dir(),
            train=work("data/tokens/regenerated.pt") if config["draft"].get("data") == "regenerate" else train_tokens(),
            heldout=work("data/tokens/heldout.pt"),
            corpus=corpus_summary(),
            teacher=target_model(),
            **({"features": work("features/target/index.json")} if config["draft"].get("data") == "features" else {}),
        output:
            model=directory(work("models/draft")),
            metrics=work("metrics/draft.json"),
        params:
            role="draft",
            model=or_stop(lambda: jobs.draft_lm_settings(config)),  # budget: drafters -> its steps
            evaluation=config["evaluation"],
            checkpoint=work("checkpoints/draft.pt"),
            device=compute_device(),
            gates=config.get("gates", {}).get("draft", {}),
            allow_weak=config.get("allow_weak_models", False),
        priority: 30  # sd, pard and the chain calibrations wait on it
        threads: config["threads"]
        resources:
            mem_mb=8000,
            runtime=training_minutes(config["draft"]),
            gpu=gpus_per_job(),
        script:
            "../scripts/train_lm.py"
