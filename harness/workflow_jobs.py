"""The command lines of the workflow's jobs, as pure functions of its config (``harness.workflow_plan``): a bench
run, a tree-shape calibration, a verifier measurement, a drafter's training (used by the Snakemake rules;
torch-free)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.catalog import entry
from harness.errors import DraftcountError
from harness.trees.beam_shape import SHAPE_FIELDS
from harness.trees.chain_shape import chain_field
from harness.workflow_datasets import benchmark_spec, dataset_category, dataset_limit, dataset_prompts
from harness.workflow_plan import (DRAFT_LM, WORKFLOW_ONLY_KEYS, drafter_path, length_variant, local_source,
                                   shape_variant, variant_datasets, variant_drafter, variant_method, variant_names,
                                   variant_options, variant_settings, variant_table, variant_temperatures)



def _option_arguments(options: dict[str, Any]) -> list[str]:
    arguments = []
    for key, value in options.items():
        value = ",".join(map(str, value)) if isinstance(value, list) else value
        arguments += ["--opt", f"{key}={value}"]
    return arguments


def run_arguments(config: dict, variant: str, dataset: str, temperature: str, work_dir: Path, target: str,
                  draft: str | None = None, drafter: str | None = None) -> list[str]:
    """Arguments of `python -m harness run` for one bench job (threads, progress and --out left to the caller)."""
    bench = config["bench"]
    method = variant_method(config, variant)
    arguments = [
        "--method", method, "--variant", variant, "--target", target,
        "--prompts", dataset_prompts(config, dataset, work_dir), "--dataset", dataset,
        "--temperature", str(temperature), "--max-new-tokens", str(bench.get("max_new_tokens", 128)),
        "--seed", str(bench.get("seed", 0)), "--dtype", bench.get("dtype", "float32"),
        "--device", str(bench.get("device", "cpu")), "--warmup", str(bench.get("warmup", 1)),
    ]
    if float(temperature) > 0:  # the warping of sampled runs (the same for the method and its paired ar)
        arguments += [*(["--top-k", str(bench["top_k"])] if bench.get("top_k") else []),
                      *(["--top-p", str(bench["top_p"])] if bench.get("top_p", 1.0) < 1.0 else [])]
    if draft:
        arguments += ["--draft", draft]
    if drafter:
        arguments += ["--drafter", drafter]
    limit = dataset_limit(config, dataset)
    if dataset_category(config, dataset):
        arguments += ["--category", dataset_category(config, dataset)]
    if limit:
        arguments += ["--limit", str(limit)] + (["--stratify"] if bench.get("stratify") else [])
    if bench.get("chat_template", "auto") != "auto":
        arguments += ["--chat-template", bench["chat_template"]]
    if bench.get("system_prompt"):
        arguments += ["--system-prompt", bench["system_prompt"]]
    if bench.get("repeats", 1) > 1:
        arguments += ["--repeats", str(bench["repeats"])]
    arguments += _option_arguments(variant_options(config, variant, temperature, work_dir))
    for key, value in bench.get("engine", {}).items():
        value = {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value
        arguments += ["--engine", f"{key}={value}"]
    verifier = variant_settings(config, variant).get("verifier")
    if verifier:
        arguments += ["--verifier", str(verifier)]
    samples = variant_settings(config, variant).get("samples")
    if samples:
        arguments += ["--samples", str(samples)]
    if variant != "ar":  # every other variant, the `ar` control (method ar) included, is paired with ar
        arguments.append("--pair-with-ar")
    return arguments


def tree_shape_arguments(config: dict, method: str, drafter: str, temperature: str, work_dir: Path, target: str,
                         drafter_dir: str, prompts: str, latency: str) -> list[str]:
    """Arguments of `python -m harness measure tree-shape` for rule tree_shape (threads, --out left out)."""
    settings = config.get("tree_shape", {})
    options = variant_settings(config, shape_variant(config, method, drafter))
    heads = config["drafters"].get(drafter, {}).get("options", {}).get("heads")  # medusa's: no deeper than its heads
    largest = {**settings, **settings.get("sampled", {})} if float(temperature) > 0 else settings  # T > 0: its own
    max_depth = min(int(largest.get("max_depth", 8)), int(heads or 1 << 30))
    # T > 0: both drafting conventions calibrated, the faster chosen, unless the variant names one (issue 79)
    drafts = ["--drafts", "both"] if float(temperature) > 0 and options.get("drafts", "auto") == "auto" else []
    return (["--method", method, "--target", target, "--drafter", drafter_dir,
             "--max-depth", str(max_depth), "--max-budget", str(largest.get("max_budget", 48)), *drafts]
            + calibration_arguments(config, settings, temperature, prompts, latency, options, SHAPE_FIELDS))


def chain_length_arguments(config: dict, method: str, drafter: str, temperature: str, work_dir: Path, target: str,
                           model: str, prompts: str, latency: str) -> list[str]:
    """Arguments of `python -m harness measure chain-length` for rule chain_length (threads, --out left out):
    ``model`` is the draft LM (``drafter`` `draft`) or the trained drafter's directory."""
    settings = config.get("chain_length", {})
    variant = length_variant(config, method, drafter)
    return (["--method", method, "--target", target, "--draft" if drafter == DRAFT_LM else "--drafter", model,
             "--max-length", str(settings.get("max_length", 8))]
            + calibration_arguments(config, settings, temperature, prompts, latency, variant_settings(config, variant),
                                    (chain_field(method),)))


def calibration_arguments(config: dict, settings: dict, temperature: str, prompts: str, latency: str,
                          options: dict, measured: tuple[str, ...]) -> list[str]:
    """What a shape calibration (tree-shape, chain-length) shares: its prompts, the latency file, the sampling and
    the variant's options but those it measures (``measured``)."""
    bench = config["bench"]
    arguments = ["--prompts", prompts, "--latency", latency, "--temperature", str(temperature),
                 "--limit", str(settings.get("prompts", 8)), "--repeats", str(settings.get("repeats", 3)),
                 "--max-new-tokens", str(settings.get("max_new_tokens", bench.get("max_new_tokens", 64))),
                 "--device", str(bench.get("device", "cpu")), "--dtype", bench.get("dtype", "float32")]
    for key, value in options.items():
        if key not in WORKFLOW_ONLY_KEYS and key not in measured:
            arguments += ["--opt", f"{key}={value}"]
    return arguments


def verifier_check_arguments(config: dict, variant: str, dataset: str, work_dir: Path, target: str,
                             draft: str | None, drafter: str | None) -> list[str]:
    """`python -m harness measure verifiers` for a traversal variant: its method and options, at its first
    temperature above 0, on checks.prompts prompts of ``dataset`` (--out left to the caller)."""
    temperature = next((t for t in variant_temperatures(config, variant) if float(t) > 0), "1")
    checks = config.get("checks", {})
    arguments = ["--method", variant_method(config, variant), "--target", target,
                 "--prompts", dataset_prompts(config, dataset, work_dir), "--limit", str(checks.get("prompts", 6)),
                 "--temperature", temperature, "--max-new-tokens", str(checks.get("new_tokens", 128)),
                 "--trials", str(checks.get("verifier_trials", 16)), "--seed", str(config["bench"].get("seed", 0)),
                 "--dtype", config["bench"].get("dtype", "float32"), "--device", str(config["bench"].get("device", "cpu"))]
    arguments += ["--draft", draft] if draft else []
    arguments += ["--drafter", drafter] if drafter else []
    return arguments + _option_arguments(variant_options(config, variant, temperature, work_dir))


def train_arguments(config: dict, drafter: str, target: str, data: str, heldout: str,
                    work_dir: Path | str) -> list[str]:
    """Arguments of `python -m harness train` for one configured drafter (checkpoint, --out etc. left out); an entry
    with `init_from` fine-tunes that configured drafter (option ``init``: its directory). Its quality gates are
    gates.drafters with the entry's own `gates` over them."""
    settings = config["drafters"][drafter]
    gates = {**config.get("gates", {}).get("drafters", {}), **settings.get("gates", {})}
    if "steps" in settings and "budget_tokens" in settings:
        raise DraftcountError(f"drafter {drafter}: give steps or budget_tokens, not both")
    length = (["--budget-tokens", str(settings["budget_tokens"])] if "budget_tokens" in settings
              else ["--steps", str(settings.get("steps", 1000))])
    return [
        "--method", settings.get("method", drafter), "--target", target, "--data", data, "--heldout", heldout,
        *length,
        *(["--time-budget-s", str(settings["time_budget_s"])] if settings.get("time_budget_s") else []),
        *[argument for key, value in gates.items() for argument in ("--gate", f"{key}={value}")],
        *(["--allow-weak"] if config.get("allow_weak_models") else []),
        "--device", str(config["bench"].get("device", "cpu")),
        *_option_arguments(settings.get("options", {})),
        *(["--opt", f"objective={settings['objective']}"] if "objective" in settings else []),
        *(["--opt", f"init={init_path(config, settings['init_from'], Path(work_dir))}"]
          if "init_from" in settings else []),
    ]


def dump_precision_arguments(config: dict, target: str, tokens: str, heldout: str, work_dir: str) -> list[str]:
    """Arguments of `python -m harness measure dump-precision` (study dump_precision; --out etc. left out): the
    `drafters` entry it names (default eagle: its method, budget and options; one reading the feature dump) on
    `sequences` windows (default features.sequences) of the dump's length and layers."""
    study, features = config["dump_precision"], config.get("features", {})
    family = study.get("family", "eagle")
    settings = config["drafters"].get(family)
    if settings is None or settings.get("data", "features") != "features" or {"path", "init_from"} & set(settings):
        raise DraftcountError(f"dump_precision.family {family!r} is not a `drafters` entry trained on the feature dump")
    length = (["--budget-tokens", str(settings["budget_tokens"])] if "budget_tokens" in settings
              else ["--steps", str(settings.get("steps", 1000))])
    return ["--target", target, "--tokens", tokens, "--heldout", heldout, "--family", settings.get("method", family),
            *length, *_option_arguments(settings.get("options", {})),
            *(["--opt", f"objective={settings['objective']}"] if "objective" in settings else []),
            "--sequences", str(study.get("sequences", features.get("sequences", 256))),
            "--seq-len", str(features.get("seq_len", 256)),
            "--layers", ",".join(map(str, features.get("layers", ["last"]))),
            "--shard-size", str(features.get("shard_size", 64)), "--seed", str(features.get("seed", 0)),
            "--device", str(config["bench"].get("device", "cpu")), "--work-dir", work_dir]


def init_path(config: dict, source: str, work_dir: Path) -> str:
    """Where a fine-tuning entry starts: the draft LM (`init_from: draft`) or a configured drafter's directory."""
    if source != DRAFT_LM:
        return drafter_path(config, source, work_dir)
    if "models" not in config:
        return str(work_dir / "models" / "draft")
    if "draft" not in config["models"]:
        raise DraftcountError("a drafter with `init_from: draft` needs models.draft in the config")
    return local_source(config["models"]["draft"], work_dir)


def drafter_positions(settings: dict) -> int | None:
    """Supervised target positions a `drafters` entry trains on: its budget_tokens, or steps x batch_size x seq_len
    (x grad_accum) of its options; None when the entry leaves that to its method's defaults."""
    if "budget_tokens" in settings:
        return int(settings["budget_tokens"])
    options = settings.get("options", {})
    if not all(key in source for key, source in (("steps", settings), ("batch_size", options), ("seq_len", options))):
        return None
    rows = int(options["batch_size"]) * int(options.get("grad_accum", 1))
    return int(settings["steps"]) * rows * int(options["seq_len"])


def draft_lm_settings(config: dict) -> dict:
    """The config's `draft` section as rule train_draft trains it: with `budget: drafters`, its train.steps follow
    from the largest budget of supervised positions of the main comparison's drafters (train.batch_size x
    train.seq_len a step), so sd's draft LM trains on at least the heads' budget whatever that becomes."""
    draft = config["draft"]
    if draft.get("budget") != "drafters":
        return draft
    if "steps" in draft["train"]:
        raise DraftcountError("draft: give train.steps or budget: drafters, not both")
    main = [variant for variant, settings in variant_table(config).items()  # bench.only aside: the whole comparison
            if not settings.get("study") and not settings.get("ablation")]
    budgets = [positions for variant in main if entry(variant_method(config, variant)).needs_drafter
               if (positions := drafter_positions(config["drafters"].get(variant_drafter(config, variant), {})))]
    if not budgets:
        raise DraftcountError("draft.budget: drafters, but no main variant's drafter gives its budget (budget_tokens, "
                              "or steps with options.batch_size and options.seq_len)")
    step = int(draft["train"]["batch_size"]) * int(draft["train"]["seq_len"])
    return {**draft, "train": {**draft["train"], "steps": -(-max(budgets) // step)}}


REGENERATE_FLAGS = ("sequences", "prompt_len", "new_tokens", "greedy_share", "batch_size", "seed", "shard_size",
                    "workers")


def regenerate_arguments(settings: dict) -> list[str]:
    """`python -m harness regenerate` flags from the config's `regenerate` section (its defaults where unset)."""
    return [argument for key in REGENERATE_FLAGS if key in settings
            for argument in (f"--{key.replace('_', '-')}", str(settings[key]))]


def benchmark_sets(config: dict) -> list[str]:
    """Every prompt set any variant of the config runs on (its main comparison, studies and ablations)."""
    return list(dict.fromkeys([*config["bench"]["datasets"], *(dataset for variant in variant_names(config)
                                                               for dataset in variant_datasets(config, variant))]))


CHAT_SPLITS = ("heldout", "calibration", "train")  # rule chat_prompts' splits of an imported target's questions, cut
# in this order: the training split last, so that it may take every question left (train: all)
SYNTH_FLAGS = ("count", "max_generated", "max_tokens", "temperature", "top_p", "min_words", "max_words",
               "min_ascii_letters", "batch_size", "seed")


def benchmark_arguments(config: dict) -> list[str]:
    """The prompt files by name, every benchmark prompt set as the bench jobs select it (each set's limit and
    bench.stratify) and the near-duplicate threshold: what rules chat_prompts, synth_questions and data_table keep
    training questions apart from."""
    bench = config["bench"]
    arguments = [argument for name, path in bench.get("dataset_paths", {}).items()
                 for argument in ("--path", f"{name}={path}")]
    for dataset in benchmark_sets(config):
        arguments += ["--benchmark", benchmark_spec(config, dataset)]
    arguments += ["--stratify"] if bench.get("stratify") else []
    return arguments + ["--near", str(config["chat_prompts"].get("near_duplicate", 0.5))]


def chat_prompts_arguments(config: dict) -> list[str]:
    """`python -m harness chat-prompts` flags (--synthesized, --out-dir, --summary left out) from the config's
    `chat_prompts`: its sources and split sizes, and the benchmark (``benchmark_arguments``), which no training
    question may share a turn or a word 8-gram with."""
    settings = config["chat_prompts"]
    arguments = benchmark_arguments(config)
    arguments += [argument for source in settings["sources"] for argument in ("--source", source)]
    arguments += [argument for split in CHAT_SPLITS for argument in ("--split", f"{split}={settings[split]}")]
    return arguments + ["--seed", str(settings.get("seed", 0))]


def synth_questions_arguments(config: dict) -> list[str]:
    """`python -m harness synth-questions` flags (--target, --out, --summary and the device left out) from the
    config's `synth_questions` and the benchmark (``benchmark_arguments``)."""
    settings = config["synth_questions"]
    return benchmark_arguments(config) + [argument for key in SYNTH_FLAGS if key in settings
                                          for argument in (f"--{key.replace('_', '-')}", str(settings[key]))]


def check_variant_arguments(config: dict, variants: list[str], temperature: str, work_dir: Path) -> list[str]:
    """``--variant JSON`` arguments of the checks that measure several methods (`measure overheads`, `measure
    host-sync`): each variant's method, its options at ``temperature`` (the files the workflow builds in place of
    `auto`) and, for a method that needs one, its drafter directory."""
    arguments = []
    for variant in variants:
        method = variant_method(config, variant)
        spec = {"name": variant, "method": method, "options": variant_options(config, variant, temperature, work_dir)}
        if entry(method).needs_drafter:
            spec["drafter"] = drafter_path(config, variant_drafter(config, variant), Path(work_dir))
        arguments += ["--variant", json.dumps(spec, sort_keys=True)]
    return arguments
