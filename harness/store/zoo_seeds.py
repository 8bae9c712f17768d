"""The zoo again from another seed (config section ``target_seeds``; workflow/rules/zoo_seed.smk, part of `studies`):
the config of the second zoo the workflow builds as module ``zoo_seed``, and its records as the main report reads them.

Every model of the zoo trains from a fixed seed (``target.train.seed``, ``draft.train.seed``, each drafter's
``options.seed``). The second zoo shifts each by ``target_seeds.seed``: another target (initialisation and data
order), the draft LM distilled from it, its feature dump, the drafters trained on that; the corpus, tokenizer and
prompts are the same files (the same seeds). It runs only the variants the decisive claims read
(``target_seeds.variants``) and its own A/A control, in its own folders (``<work_dir>-zoo-seed<s>``,
``<results_dir>/zoo-seed<s>``). Its records are copied into the main results as ``<variant>_target<s>``
(``write_target_seed_records``), which the claims table reads as ``<variant>`` on another target
(``methods/lyanna/claims_checks.py``). Torch-free: the Snakefile calls it before planning anything.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from harness.errors import DraftcountError
from harness.store.records import atomic_jsonl, read_records, write_record

SECTION = "target_seeds"
STUDY_KEYS = ("real", SECTION, "seeds_study", "lr_study", "learning_curves", "dump_precision")  # no studies there
CONTROL = "ar_control"  # the A/A control: run in the second zoo (its own summary), not read by the claims


def target_variant(variant: str, seed: int) -> str:
    """The name a variant's runs on the zoo of target seed ``seed`` take in the main results."""
    return f"{variant}_target{seed}"


def zoo_seed_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """The second zoo's config (None where ``target_seeds`` is absent or runs no variant): ``config`` without its
    studies, every training seed shifted by ``target_seeds.seed``, ``bench.only`` the decisive variants the config
    runs (those of ``bench.methods``, and of its ``bench.only`` where it has one) and the A/A control, its own work
    and results folders. ``config`` is the checked config before the rules add their entries to it."""
    section = config.get(SECTION)
    if not section:
        return None
    methods, only = config["bench"]["methods"], config["bench"].get("only")
    variants = [variant for variant in section["variants"] if variant in methods and (not only or variant in only)]
    if not variants:
        return None
    if "models" in config or "gguf" in config:
        raise DraftcountError(f"{SECTION} retrains the zoo: a config with `models:` or `gguf:` has none to retrain")
    seed = int(section["seed"])
    zoo = copy.deepcopy({key: value for key, value in config.items() if key not in STUDY_KEYS})
    zoo["work_dir"] = f"{config.get('work_dir', 'work')}-zoo-seed{seed}"
    zoo["results_dir"] = str(Path(config.get("results_dir", "results")) / f"zoo-seed{seed}")
    for model in ("target", "draft"):
        train = zoo[model].setdefault("train", {})
        train["seed"] = int(train.get("seed", 0)) + seed
    for entry in zoo.get("drafters", {}).values():
        if "path" not in entry:  # a ready-made drafter is not trained here
            options = entry.get("options", {})
            entry["options"] = {**options, "seed": int(options.get("seed", 0)) + seed}
    zoo["bench"]["only"] = list(dict.fromkeys([CONTROL] * (CONTROL in methods) + variants))
    zoo["bench"].pop("load_variants", None)  # the load study's: not run there (its variants may be left out)
    return zoo


def write_target_seed_records(source: Path | str, out: Path | str, seed: int) -> int:
    """``source``'s records (a run of the zoo of target seed ``seed``) to ``out``, each method record's variant
    renamed ``<variant>_target<seed>`` (its paired `ar` records as they are); the number of records."""
    records = read_records(Path(source))
    with atomic_jsonl(Path(out)) as handle:
        for record in records:
            if record["role"] == "method":
                record = {**record, "variant": target_variant(record.get("variant") or record["method"], seed)}
            write_record(handle, record)
    return len(records)
