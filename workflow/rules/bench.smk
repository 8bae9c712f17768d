# Benchmarks: every variant x dataset x temperature, each paired prompt by prompt with `ar`.
#
# bench.methods maps a variant name to its options; the key `method` names the
# registered method (default: the variant name itself), so one method can run
# under several configurations (tree_sd with SpecInfer and Sequoia trees, say).
# tree_file: auto stands for the Sequoia tree the workflow searched for that temperature, with
# the budget in tree_budget (auto: the one maximising estimated tokens/s on this machine), or for
# stand the data-driven static tree of tree_nodes nodes; datastore: auto for the retrieval
# datastore, head: auto for the trained drafter named by `drafter` (workflow/rules/model_free.smk).

def variant_method(variant):
    return plan.variant_method(config, variant)


def variant_drafter(variant):
    return plan.variant_drafter(config, variant)


def variants_of(method, ablation=False):
    """bench_<method> / ablate_<method>: that method's variants, but the learning curves' chain runs (a study's)."""
    return [variant for variant in plan.method_variants(config, method, ablation) if variant not in CURVE_VARIANTS]


def bench_outputs(variants=None, engine_pass=None):
    """Raw records of the given variants (default: all): ablations on bench.ablation_datasets. ``engine_pass``:
    those of an engine pass (bench.passes) under raw-<pass>/ instead of the default pass's raw/."""
    raw = "raw" if engine_pass is None else f"raw-{engine_pass}"
    outputs = []
    for variant in variant_names() if variants is None else variants:
        outputs += expand(results(raw + "/{variant}/{dataset}-t{temperature}.jsonl"), variant=variant,
                          dataset=plan.variant_datasets(config, variant),
                          temperature=plan.variant_temperatures(config, variant))
    return outputs


def bench_outputs_named(variants, names):
    """The raw records of ``variants`` whose file name (``<dataset>-t<T>.jsonl``) is one of ``names``: a main
    variant's runs on the sets and temperatures a study reads beside its own."""
    return [path for path in bench_outputs(variants) if Path(path).name in names]


def bench_inputs(wildcards):
    inputs = {"target": target_model()}
    method = variant_method(wildcards.variant)
    if plan.needs_draft_lm(method):
        inputs["draft"] = draft_model()
    if plan.needs_drafter(method):
        inputs["drafter"] = drafter_dir(variant_drafter(wildcards.variant))
    if wildcards.dataset in prompt_sets.BUILT_PROMPT_SETS:
        inputs["prompts"] = work(f"prompts/{wildcards.dataset}.jsonl")
    inputs.update(plan.built_inputs(config, wildcards.variant, wildcards.temperature, WORK))
    return inputs


def bench_arguments(wildcards, input):
    """The `python -m harness run` arguments of one job; an engine pass's switches over bench.engine."""
    arguments = jobs.run_arguments(plan.with_engine_pass(config, wildcards.get("pass")), wildcards.variant,
                                   wildcards.dataset, wildcards.temperature, WORK, input.target, input.get("draft"),
                                   input.get("drafter"))
    return shlex.join(arguments)


# What each prompt set a bench job runs holds: read from its prompt file once (prompt_sets.dataset_selection), shown now
# (with the results dir it runs for: target `real` plans its own) so a dry run says it, and used to size each job's
# time limit.
SELECTIONS = {}


def dataset_selection(dataset):
    if dataset not in SELECTIONS:
        # a bad prompt file (not UTF-8, a record without turns): one line naming it
        SELECTIONS[dataset] = or_stop(lambda: prompt_sets.dataset_selection(config, dataset, WORK))
    return SELECTIONS[dataset]


for _dataset in dict.fromkeys(config["bench"]["datasets"] + config["bench"].get("ablation_datasets", [])
                              + jobs.benchmark_sets(config)):  # and the sets only some variants run
    _selection = dataset_selection(_dataset)
    if _selection:
        _turns, _counts = _selection
        print(f"{_dataset}: {sum(_counts.values())} prompts, {_turns} turns, {len(_counts)} categories"
              f"{' (stratified)' if config['bench'].get('stratify') else ''}: "
              + ", ".join(f"{name} {count}" for name, count in _counts.items()) + f" [{RESULTS}]", file=sys.stderr)


def bench_runtime(wildcards):
    """Minutes for one bench job (SLURM -t), sized from bench.seconds_per_token; over bench.max_runtime_minutes
    (a cluster's cap, default 24 h) the plan stops and says what to lower."""
    minutes = prompt_sets.bench_runtime_minutes(config, wildcards.dataset, dataset_selection(wildcards.dataset))
    cap = config["bench"].get("max_runtime_minutes", 1440)
    if minutes > cap:
        raise ValueError(f"bench job {wildcards.variant}/{wildcards.dataset} needs about {minutes} min, over "
                         f"bench.max_runtime_minutes ({cap}): lower bench.limit, max_new_tokens or repeats")
    return minutes


def control_runs():
    """The timed runs of the A/A control (the variants of method `ar`), every dataset and temperature."""
    return bench_outputs([variant for variant in variant_names() if variant_method(variant) == "ar"])


def bench_gate(wildcards):
    """What a timed job waits for under the quick check (quick.share_gpu): every model the timed variants run, so that
    no training shares the GPU while a job is timed (the lossless runs and the CUDA tests come after the timed
    stage: workflow/scripts/gpu_quick.sh runs the stages in turn); and, for a method's job, the A/A control's runs,
    which come first (a window cut short keeps the control)."""
    if not QUICK.get("share_gpu", False):
        return []
    models = set() if variant_method(wildcards.variant) == "ar" else set(control_runs())
    models.add(target_model())
    for variant in variant_names():
        method = variant_method(variant)
        if plan.needs_draft_lm(method):
            models.add(draft_model())
        if plan.needs_drafter(method):
            models.add(drafter_dir(variant_drafter(variant)))
    return sorted(models)


rule bench:
    input:
        unpack(bench_inputs),
        gate=bench_gate,
    output:
        results("raw/{variant}/{dataset}-t{temperature}.jsonl"),
    params:
        arguments=bench_arguments,
    wildcard_constraints:
        variant="|".join(variant_names() + plan.implied_variants(config)),
        temperature=r"[0-9.]+",
    threads: config["bench"].get("threads", config["threads"])
    resources:
        mem_mb=8000,
        runtime=bench_runtime,
        gpu=gpus_per_job(timed=True),
    shell:
        "python -m harness run {params.arguments} --threads {threads} --out {output}"


# The same benchmark under another engine setting (bench.passes: name -> engine switches), into raw-<pass>/.
if engine_passes():

    use rule bench as bench_pass with:
        output:
            results("raw-{pass,%s}/{variant}/{dataset}-t{temperature}.jsonl" % "|".join(engine_passes())),


# bench_<method>: every main variant of a catalog method; ablate_<method>: its ablation and budget-sweep variants;
# train_<method> (drafters.smk): its trained drafters
for _method in catalog_methods():

    rule:
        name:
            f"bench_{_method}"
        input:
            bench_outputs(variants_of(_method)),

    rule:
        name:
            f"ablate_{_method}"
        input:
            bench_outputs(variants_of(_method, ablation=True)),
