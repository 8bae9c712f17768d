# Studies that retrain drafters (each gates nothing: a study measures). Included before drafters.smk, which trains
# the entries these add to `drafters` at plan time.
#
# `learning_curves` (config section `learning_curves`; target study_learning_curves, part of `studies`): each listed
# family retrained at every rung, a multiple of its main budget (budget_tokens, or steps), as <family>_lc<rung>
# (0.125 -> lc0125, 2 -> lc2), with the family's data, options and schedule shape. Rule learning_curves reads the
# rungs' training metrics and the main drafter's (rung 1): held-out agreement per draft step against training
# positions, and the ranking's stability between adjacent rungs (harness/analysis/learning_curves.py).
#
# `lr` (config section `lr_study`; target study_lr, part of `studies`): each listed family at every learning rate at
# its main budget, as <family>_lr<rate> (0.0003 -> lr00003); the rate equal to its own is the main drafter. Rule
# lr_study picks each family's rate by held-out agreement (never by the benchmark prompts).

import copy

LEARNING_CURVES = config.get("learning_curves", {})
LR_STUDY = config.get("lr_study", {})
STUDY_DRAFTERS = set()  # the entries added here: trained by their studies, not by train_<method>


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


def rung_table():
    """{drafter: (family, rung)} of every rung, the main drafter as rung 1."""
    rungs = sorted({1.0, *map(float, LEARNING_CURVES.get("rungs", []))})
    return {rung_drafter(family, rung): (family, rung) for family in LEARNING_CURVES.get("families", [])
            for rung in rungs}


def lr_table():
    """{drafter: (family, rate)} of every rate of every family."""
    return {lr_drafter(family, float(rate)): (family, float(rate)) for family in LR_STUDY.get("families", [])
            for rate in LR_STUDY.get("rates", [])}


for _name, (_family, _rung) in rung_table().items():
    add_study_drafter(_family, _name, scaled_budget(_rung))
for _name, (_family, _rate) in lr_table().items():
    add_study_drafter(_family, _name, learning_rate(_rate))


if LEARNING_CURVES:

    rule learning_curves:
        input:
            [work(f"metrics/drafter-{name}.json") for name in rung_table()],
        output:
            table=results("studies/tables/learning_curves.csv"),
            stability=results("studies/tables/learning_curves_stability.csv"),
            figure=multiext(results("studies/figures/learning_curves"), ".pdf", ".png"),
        params:
            rungs=",".join(f"{name}={family}:{rung:g}" for name, (family, rung) in rung_table().items()),
            figure=results("studies/figures/learning_curves"),
        localrule: True
        resources:
            mem_mb=2000,
            runtime=10,
        shell:
            "python -m harness learning-curves --metrics {input} --rungs {params.rungs} --out {output.table}"
            " --figure {params.figure}"

    rule study_learning_curves:
        input:
            rules.learning_curves.output,


if LR_STUDY:

    rule lr_study:
        input:
            [work(f"metrics/drafter-{name}.json") for name in lr_table()],
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
            rules.lr_study.output,
