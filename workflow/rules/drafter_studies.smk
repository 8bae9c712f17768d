# Studies that retrain drafters (each gates nothing: a study measures). Included before drafters.smk, which trains
# the entries these add to `drafters` at plan time.
#
# `learning_curves` (config section `learning_curves`; target study_learning_curves, part of `studies`): each listed
# family retrained at every rung, a multiple of its main budget (budget_tokens, or steps), as <family>_lc<rung>
# (0.125 -> lc0125, 2 -> lc2), with the family's data, options and schedule shape. Rule learning_curves reads the
# rungs' training metrics and the main drafter's (rung 1): held-out agreement per draft step against training
# positions, the ranking's stability between adjacent rungs (harness/analysis/learning_curves.py), and each family's
# fitted line against log positions with where lyanna's meets eagle's (harness/analysis/curve_fit.py). With
# `learning_curves.chain`, every rung's drafter also drafts a chain of equal length (its family's options there) on
# one prompt set at every bench temperature, bench variant <drafter>_chain, paired with `ar` like every bench run:
# the table gains each rung's tau and paired speedup (drafter quality without tree search). With
# `learning_curves.calibrated`, every rung's drafter of the families listed there also runs as its family's main
# variant (its own calibrated shape or length: budget / gamma / k / verify_length auto) on one prompt set, bench
# variant <drafter> (rung 1: the main variant's own runs on that set): the table gains each rung's calibrated shape,
# accepted drafts per step, tau and paired speedup. Those runs are read by rule learning_curves only, not by the
# studies' summary and report (CURVE_VARIANTS).
#
# `lr` (config section `lr_study`; target study_lr, part of `studies`): each listed family at every learning rate at
# its main budget, as <family>_lr<rate> (0.0003 -> lr00003); the rate equal to its own is the main drafter, and a
# family whose own rate is off the grid has it as one more row. With `neighbours: n` the rates are a ladder and each
# family trains only the n on each side of its own: the table shows whether its own rate beats both sides (it is
# chosen) or where to move it. Rule lr_study picks each family's rate by held-out agreement (never by the benchmark
# prompts).
#
# `seeds` (config section `seeds_study`; target study_seeds, part of `studies`): each listed family's drafter
# retrained with another seed (initialisation and data order) at its main budget and rate, as <family>_seed<seed>, and
# benchmarked as bench variant <family>_seed<seed> with its main variant's options (a calibrated shape of its own):
# whether two drafters of one recipe rank the same (report.compare pairs each with its main variant).
#
# `dump_precision` (config section `dump_precision`; rule dump_precision, part of `studies`): a family's drafter trained
# on a float32 feature dump and on its float16 copy (`python -m harness measure dump-precision`): does the dump's
# features.dtype float16 train the drafter float32 does (results/studies/tables/dump_precision.csv).

import copy

LEARNING_CURVES = config.get("learning_curves", {})
DUMP_PRECISION = config.get("dump_precision", {})
LR_STUDY = config.get("lr_study", {})
SEEDS_STUDY = config.get("seeds_study", {})
STUDY_DRAFTERS = set()  # the entries added here: trained by their studies, not by train_<method>
CURVE_VARIANTS = {}  # bench variant -> the rung's drafter: the learning curves' own runs (rule learning_curves)
CALIBRATED_RUNS = {}  # bench variant -> the rung's drafter: each rung at its calibrated shape (the main variant's at 1)
OWN_STUDY_RULES = {"learning_curves"}  # studies whose study_<name> rule is here, not report.smk's generic one


def study_drafter(family, suffix, value):
    return f"{family}_{suffix}{f'{value:g}'.replace('.', '').replace('-', 'm')}"


def rung_drafter(family, rung):
    return family if rung == 1 else study_drafter(family, "lc", rung)


def lr_drafter(family, rate):
    own = config["drafters"][family].get("options", {}).get("lr")
    return family if own is not None and float(own) == rate else study_drafter(family, "lr", rate)


def add_study_drafter(family, name, change):
    """A copy of `family`'s drafter entry under `name`, changed by `change(entry)`, gated by nothing."""
    if family not in config["drafters"]:
        raise ValueError(f"a drafter study names family {family!r}, which is not a `drafters` entry")
    if name == family:
        return
    if name in config["drafters"]:
        raise ValueError(f"a drafter study's entry {name!r} is already a `drafters` entry (two rungs or rates that "
                         f"round to one name?)")
    entry = copy.deepcopy(config["drafters"][family])
    entry["method"] = config["drafters"][family].get("method", family)
    change(entry)
    entry["gates"] = {"min_heldout_agreement": 0.0}
    config["drafters"][name] = entry
    STUDY_DRAFTERS.add(name)


def scaled_budget(rung):
    def change(entry):
        if "expected_minutes" in entry:  # its time limit (SLURM) grows with its budget
            entry["expected_minutes"] = max(1, round(entry["expected_minutes"] * rung))
        if "budget_tokens" in entry:
            entry["budget_tokens"] = max(1, round(entry["budget_tokens"] * rung))
        else:
            entry["steps"] = max(1, round(entry.get("steps", 1000) * rung))

    return change


def learning_rate(rate):
    def change(entry):
        entry["options"] = {**entry.get("options", {}), "lr": rate}

    return change


def add_study_variant(name, settings, family=None):
    """Bench variant `name` of a drafter study; a config that runs `bench.only` runs it too (the study asks for it),
    unless it is a `family`'s variant and `bench.only` leaves that family's main variant out (a hybrid or GPU config
    that runs no eagle runs no eagle seed either)."""
    if name in config["bench"]["methods"]:
        raise ValueError(f"a drafter study's bench variant {name!r} is already a bench.methods entry")
    config["bench"]["methods"][name] = settings
    only = config["bench"].get("only")
    if only and (family is None or family in only):
        config["bench"]["only"] = [*only, name]


def drafter_seed(seed):
    def change(entry):
        entry["options"] = {**entry.get("options", {}), "seed": seed}

    return change


def main_settings(family, section):
    """`family`'s main bench variant's settings (a study runs another drafter as it); one line where it has none."""
    main = config["bench"]["methods"].get(family)
    if main is None or main.get("study") or main.get("ablation"):
        raise ValueError(f"{section} names family {family!r}, which has no main bench variant of that name")
    return main


def add_main_variant_of(name, family, drafter, study, section, **changes):
    """Bench variant `name`: `family`'s main variant drafting with `drafter`, in `study` (with `changes`)."""
    main = main_settings(family, section)
    add_study_variant(name, {**main, "method": main.get("method", family), "drafter": drafter, "study": study,
                             **changes}, family)


def add_seed_variant(family, drafter):
    """Bench variant `drafter` (a seed of `family`): the family's main variant with that drafter, in study seeds."""
    add_main_variant_of(drafter, family, drafter, "seeds", "seeds_study")


def rung_table():
    """{drafter: (family, rung)} of every rung, the main drafter as rung 1."""
    rungs = sorted({1.0, *map(float, LEARNING_CURVES.get("rungs", []))})
    return {rung_drafter(family, rung): (family, rung) for family in LEARNING_CURVES.get("families", [])
            for rung in rungs}


LR_LADDER_GAPS = {}  # family -> why the ladder cannot show its own rate between n neighbours (rule lr_study stops)


def lr_rates(family):
    """`family`'s rates in the lr study: every rate of `lr_study.rates` and its own (the main drafter, a row even off
    that grid); with `neighbours: n`, the n rates on each side of its own on that ladder. No own rate, a rate off
    the ladder or one near its end is noted in LR_LADDER_GAPS (planning study_lr then stops; any other target plans
    as usual) and trains the rates there are."""
    own = config["drafters"].get(family, {}).get("options", {}).get("lr")
    ladder = sorted(map(float, LR_STUDY.get("rates", [])))
    n = LR_STUDY.get("neighbours", 0)
    mine = sorted({*ladder, *([float(own)] if own is not None else [])})
    if not n:
        return mine
    if own is None:
        LR_LADDER_GAPS[family] = f"family {family!r} has no options.lr of its own to frame on the ladder"
        return mine
    if float(own) not in ladder:
        LR_LADDER_GAPS[family] = f"family {family!r}'s own rate {own} is not one of lr_study.rates"
    at = mine.index(float(own))
    if at < n or at + n >= len(mine):
        LR_LADDER_GAPS.setdefault(family, f"family {family!r}'s own rate {own} has fewer than {n} rates of "
                                          f"lr_study.rates on one side (extend the ladder)")
    return mine[max(at - n, 0):at + n + 1]


def lr_study_metrics(wildcards):
    """Rule lr_study's inputs; a family the ladder cannot frame stops the plan with one line."""
    if LR_LADDER_GAPS:
        raise ValueError("lr_study.neighbours: " + "; ".join(LR_LADDER_GAPS.values()))
    return [work(f"metrics/drafter-{name}.json") for name in lr_table()]


def lr_table():
    """{drafter: (family, rate)} of every rate of every family, its own rate included."""
    return {lr_drafter(family, rate): (family, rate) for family in LR_STUDY.get("families", [])
            for rate in lr_rates(family)}


for _name, (_family, _rung) in rung_table().items():
    add_study_drafter(_family, _name, scaled_budget(_rung))
for _name, (_family, _rate) in lr_table().items():
    add_study_drafter(_family, _name, learning_rate(_rate))
for _family in SEEDS_STUDY.get("families", []):
    for _seed in SEEDS_STUDY.get("seeds", []):
        add_study_drafter(_family, f"{_family}_seed{_seed}", drafter_seed(_seed))
        add_seed_variant(_family, f"{_family}_seed{_seed}")


def curve_temperatures(section):
    """A learning-curve run's `temperatures` setting: the section's own list, or none (every bench temperature)."""
    return {"temperatures": section["temperatures"]} if "temperatures" in section else {}


def add_chain_variant(drafter, family, chain):
    """Bench variant <drafter>_chain: the rung's drafter drafting the chain its family's `chain.options` give."""
    if family not in chain["options"]:
        raise ValueError(f"learning_curves.chain.options has no entry for family {family!r} (the options that make "
                         f"its method draft a chain of the study's length)")
    variant = f"{drafter}_chain"
    add_study_variant(variant, {**chain["options"][family], "method": config["drafters"][family].get("method", family),
                                "drafter": drafter, "study": "learning_curves", "datasets": [chain["dataset"]],
                                **curve_temperatures(chain)})
    CURVE_VARIANTS[variant] = drafter


def add_calibrated_variant(drafter, family, rung, calibrated):
    """Bench variant <drafter>: the rung's drafter as its family's main variant (a calibrated shape of its own) on
    `calibrated.dataset`; rung 1 is the main variant itself."""
    main_settings(family, "learning_curves.calibrated")
    if calibrated["dataset"] not in plan.variant_datasets(config, family):
        raise ValueError(f"learning_curves.calibrated.dataset {calibrated['dataset']!r} is not a prompt set family "
                         f"{family!r}'s main variant runs on (rung 1 reads those runs)")
    missing = sorted({f"{float(t):g}" for t in calibrated.get("temperatures", [])}
                     - set(plan.variant_temperatures(config, family)))
    if missing:
        raise ValueError(f"learning_curves.calibrated.temperatures: family {family!r}'s main variant does not run at "
                         f"T = {', '.join(missing)} (rung 1 reads those runs)")
    if rung != 1:
        add_main_variant_of(drafter, family, drafter, "learning_curves", "learning_curves.calibrated",
                            datasets=[calibrated["dataset"]], **curve_temperatures(calibrated))
        CURVE_VARIANTS[drafter] = drafter
    CALIBRATED_RUNS[drafter if rung != 1 else family] = drafter


if LEARNING_CURVES.get("chain"):
    for _name, (_family, _rung) in rung_table().items():
        add_chain_variant(_name, _family, LEARNING_CURVES["chain"])
if LEARNING_CURVES.get("calibrated"):
    _calibrated = LEARNING_CURVES["calibrated"]
    _unknown = sorted(set(_calibrated.get("families", [])) - set(LEARNING_CURVES["families"]))
    if _unknown:
        raise ValueError(f"learning_curves.calibrated.families names {_unknown[0]!r}, which is not one of "
                         f"learning_curves.families (only their rungs are trained)")
    for _name, (_family, _rung) in rung_table().items():
        if _family in _calibrated.get("families", LEARNING_CURVES["families"]):
            add_calibrated_variant(_name, _family, _rung, _calibrated)


DRAFT_LM_RUNGS = {}  # model name (draft_lc05) -> rung: the draft LM's learning curve (learning_curves.draft_lm)

if LEARNING_CURVES.get("draft_lm"):
    if external_models():
        raise ValueError("learning_curves.draft_lm: this config's draft LM is a checkpoint (`models:`), not trained here")
    DRAFT_LM_RUNGS = {study_drafter("draft", "lc", rung): rung for rung in map(float, LEARNING_CURVES["rungs"])
                      if rung != 1}

    def rung_draft_lm(rung):
        """The draft LM's settings (rule train_draft's) at ``rung`` times its steps."""
        settings = jobs.draft_lm_settings(config)
        if "steps" not in settings["train"]:
            raise ValueError("learning_curves.draft_lm: the draft LM's train.steps (or budget: drafters) sets its rungs")
        return {**settings, "train": {**settings["train"], "steps": max(1, round(settings["train"]["steps"] * rung))}}

    DRAFT_LM_SETTINGS = {name: or_stop(lambda rung=rung: rung_draft_lm(rung)) for name, rung in DRAFT_LM_RUNGS.items()}

    # the draft LM at each rung: rule train_draft's inputs and gates at a multiple of its steps (a study: its quality
    # is reported, gated by nothing)
    rule train_draft_rung:
        input:
            **rules.train_draft.input,
        output:
            model=directory(work("models/{draft_rung}")),
            metrics=work("metrics/{draft_rung}.json"),
        wildcard_constraints:
            draft_rung="|".join(DRAFT_LM_RUNGS) or "^$",
        params:
            role="draft",
            model=lambda wildcards: DRAFT_LM_SETTINGS[wildcards.draft_rung],  # checked at plan time
            evaluation=config["evaluation"],
            checkpoint=lambda wildcards: work(f"checkpoints/{wildcards.draft_rung}.pt"),
            device=compute_device(),
            gates={},
            allow_weak=True,
        priority: 20
        threads: config["threads"]
        resources:
            mem_mb=8000,
            runtime=lambda wildcards: max(1, round(training_minutes(config["draft"]) * DRAFT_LM_RUNGS[wildcards.draft_rung])),
            gpu=gpus_per_job(),
        script:
            "../scripts/train_lm.py"


def draft_lm_metrics():
    """The draft LM's rungs' metrics (rung 1: rule train_draft's), when its curve is part of the study."""
    if not DRAFT_LM_RUNGS:
        return []
    return [work("metrics/draft.json")] + [work(f"metrics/{name}.json") for name in DRAFT_LM_RUNGS]


if LEARNING_CURVES:

    def chain_records(wildcards):
        """The chain runs and the calibrated ones (bench.smk's bench_outputs, included after this file): a main
        variant's on the calibrated set only."""
        calibrated = LEARNING_CURVES.get("calibrated", {})
        names = {f"{calibrated.get('dataset')}-t{float(temperature):g}.jsonl" for temperature in
                 calibrated.get("temperatures", plan.temperature_names(config))}
        mains = [variant for variant in CALIBRATED_RUNS if variant not in CURVE_VARIANTS]
        return bench_outputs(list(CURVE_VARIANTS)) + bench_outputs_named(mains, names)

    rule learning_curves:
        input:
            metrics=[work(f"metrics/drafter-{name}.json") for name in rung_table()],
            draft_lm=draft_lm_metrics(),
            records=chain_records,
        output:
            table=results("studies/tables/learning_curves.csv"),
            stability=results("studies/tables/learning_curves_stability.csv"),
            fit=results("studies/tables/learning_curves_fit.csv"),
            figure=multiext(results("studies/figures/learning_curves"), ".pdf", ".png"),
        params:
            rungs=",".join(f"{name}={family}:{rung:g}" for name, (family, rung) in rung_table().items()),
            chains=" --chains " + ",".join(f"{drafter}={variant}" for variant, drafter in CURVE_VARIANTS.items()
                                           if variant not in CALIBRATED_RUNS) if LEARNING_CURVES.get("chain") else "",
            calibrated=(" --calibrated " + ",".join(f"{drafter}={variant}" for variant, drafter in
                                                    CALIBRATED_RUNS.items())
                        + f" --calibrated-dataset {LEARNING_CURVES['calibrated']['dataset']}")
            if CALIBRATED_RUNS else "",
            figure=results("studies/figures/learning_curves"),
            draft_lm=(" --draft-lm " + ",".join(f"{name}={rung:g}" for name, rung in
                                                  {"draft": 1.0, **DRAFT_LM_RUNGS}.items())) if DRAFT_LM_RUNGS else "",
        localrule: True
        resources:
            mem_mb=2000,
            runtime=10,
        shell:
            "python -m harness learning-curves --metrics {input.metrics} {input.draft_lm} --rungs {params.rungs}"
            " --out {output.table} --figure {params.figure}{params.chains}{params.calibrated}{params.draft_lm}"
            + (" --records {input.records}" if CURVE_VARIANTS or CALIBRATED_RUNS else "")

    # the study's targets name the drafters and runs too: a clone's committed tables alone would read as done
    rule study_learning_curves:
        input:
            rules.learning_curves.input.metrics,
            draft_lm_metrics(),
            chain_records,
            rules.learning_curves.output,


def warn_stale_rates():
    """At plan time: a family whose configured rate is not the one the written lr table chose, said on stderr."""
    table = Path(results("studies/tables/lr.csv"))
    if LR_STUDY and table.is_file():
        from harness.analysis.lr_study import stale_rates
        import pandas as pd

        for line in stale_rates(pd.read_csv(table), config["drafters"]):
            print(f"warning: {table}: {line} (set drafters.<family>.options.lr, or rerun study_lr)", file=sys.stderr)


warn_stale_rates()


if LR_STUDY:

    rule lr_study:
        input:
            lr_study_metrics,
        output:
            results("studies/tables/lr.csv"),
        params:
            rates=",".join(f"{name}={family}:{rate:g}" for name, (family, rate) in lr_table().items()),
        localrule: True
        resources:
            mem_mb=2000,
            runtime=10,
        shell:
            "python -m harness lr-study --metrics {input} --rates {params.rates} --out {output}"

    rule study_lr:
        input:
            rules.lr_study.input,
            rules.lr_study.output,


if DUMP_PRECISION:

    rule dump_precision:
        input:
            target=target_model(),
            train=train_tokens(),
            heldout=work("data/tokens/heldout.pt"),
        output:
            results("studies/tables/dump_precision.csv"),
        params:
            arguments=lambda wildcards, input: shlex.join(jobs.dump_precision_arguments(
                config, input.target, input.train, input.heldout, work("dump_precision"))),
        threads: config["threads"]
        resources:
            mem_mb=8000,
            runtime=2 * training_minutes(config["drafters"].get(DUMP_PRECISION.get("family", "eagle"), {})),
            gpu=gpus_per_job(),
        shell:
            "python -m harness measure dump-precision {params.arguments} --threads {threads} --out {output}"
