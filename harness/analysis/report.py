"""results/report.md: the summary tables, the figures, the environment and how each number was measured.

Every number in the report is read from the tables written by ``python -m
harness summarize`` (which recomputes them from the raw records), so the
report and the CSVs cannot disagree.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from harness.store.atomic import atomic_path
from harness.errors import DraftcountError
from harness.analysis.categories import category_sections
from harness.analysis.summary import records_frame
from harness.analysis.captions import FIGURES
from harness.analysis.figures import budget_families
from harness.analysis.metrics import report_definitions, report_metrics
from harness.store.records import read_records
from harness.analysis.report_timing import control_section, cost_section, phase_section
from harness.analysis.context_length import context_section
from harness.analysis.polybasic import COST_RULE_INTRO, cost_rule_markdown, cost_rule_table
from harness.analysis.families import comparison_table, family_table
from harness.analysis.tables import cell, markdown_table, metric_cells
from harness.analysis.regime import regime_card
from harness.analysis.trust import trust_warnings, warning_block



def results_table(summary: pd.DataFrame) -> str:
    """A markdown table of the summary rows given, one row per variant x dataset x temperature."""
    table = summary.copy()
    table["speedup_ci"] = [
        "-" if pd.isna(low) else f"[{low:.2f}, {high:.2f}]"
        for low, high in zip(table.speedup_ci_low, table.speedup_ci_high)]
    columns = report_metrics()
    if "repeats" in table and (table.repeats.fillna(1) > 1).any():  # bench.repeats: mean +- std over runs
        columns = report_metrics([*[metric.name for metric in columns], "speedup_repeat_std"])
    header = ["variant", "dataset", "T"] + [metric.label for metric in columns]
    rows = []
    for _, row in table.iterrows():
        cells = [row.variant, row.dataset, f"{row.temperature:g}"]
        cells += metric_cells(row, columns)
        rows.append(cells)
    return markdown_table(header, rows)


def run_settings(records_paths: list[Path]) -> dict[str, Any]:
    """What every run shared (environment, sampling, lengths) and what the models were, from the records."""
    first: dict[str, Any] = {}
    prompts: dict[str, set[str]] = {}
    revisions, models, drafters = set(), {}, {}
    for path in records_paths:
        for record in read_records(path):
            first = first or record
            prompts.setdefault(record["dataset"], set()).add(record["prompt_id"])
            revisions.add(record.get("git_revision"))
            for role in ("target", "draft"):
                if record["models"].get(role):
                    models[role] = (record["models"][role], record["models"].get(f"{role}_parameters"))
            if record["role"] == "method" and record["models"].get("drafter"):
                drafters[record["variant"]] = (record["models"]["drafter"],
                                               record.get("method_details", {}).get("drafter_parameters"))
    if not first:
        raise DraftcountError("no records to report on")
    return {"first": first, "prompts": {name: len(ids) for name, ids in sorted(prompts.items())},
            "revisions": sorted(str(revision) for revision in revisions), "models": models, "drafters": drafters}


def environment_section(settings: dict[str, Any]) -> str:
    record = settings["first"]
    hardware, versions = record["hardware"], record["versions"]
    gpus = ", ".join(hardware.get("gpus") or []) or "none"
    lines = [
        f"- Hardware: {hardware['cpu']} ({hardware['cpu_count']} logical CPUs; torch threads per run: "
        f"{hardware['torch_threads']}), GPUs: {gpus}; {hardware['platform']}",
        "- Versions: " + ", ".join(f"{name} {value}" for name, value in versions.items() if value),
        "- Git revision of the runs: " + ", ".join(f"`{revision}`" for revision in settings["revisions"]),
        f"- Device {record['device']}, dtype {record['dtype']}, max new tokens {record['max_new_tokens']}, "
        f"seed {record['seed']}, timer `{record.get('timer', 'perf_counter')}`",
        "- Prompts per dataset: " + ", ".join(f"{name} {count}" for name, count in settings["prompts"].items()),
    ]
    for role, (path, parameters) in sorted(settings["models"].items()):
        size = f", {parameters / 1e6:.2f}M parameters" if parameters else ""
        lines.append(f"- {role} model: `{path}`{size}")
    for variant, (path, parameters) in sorted(settings["drafters"].items()):
        size = f", {parameters / 1e6:.3f}M trainable parameters" if parameters else ""
        lines.append(f"- drafter of `{variant}`: `{path}`{size}")
    return "\n".join(lines)


def training_section(metrics_paths: list[Path]) -> str:
    """One row per trained model or drafter: parameters, steps, seconds, and its held-out quality."""
    if not metrics_paths:
        return ""
    rows = []
    for path in metrics_paths:
        metrics = json.loads(Path(path).read_text())
        train = metrics.get("train") or metrics.get("training") or {}
        parameters = metrics.get("trainable_parameters") or metrics.get("parameters")
        if "heldout_perplexity" in metrics:
            quality = f"perplexity {metrics['heldout_perplexity']:.1f}"
        elif "heldout_top1_agreement_by_depth" in metrics:
            agreement = metrics["heldout_top1_agreement_by_depth"]
            quality = "top-1 agreement by depth " + ", ".join(f"{value:.2f}" for value in agreement)
        elif "heldout_top1_agreement_by_step" in metrics:  # EAGLE: on true features, then on its own
            agreement = metrics["heldout_top1_agreement_by_step"]
            quality = "top-1 agreement by step " + ", ".join(f"{value:.2f}" for value in agreement)
        else:
            quality = "-"
        base = metrics.get("grown_from")
        if base:  # a grown target: its first stage, then the deepened model trained on
            stage = base.get("training") or {}
            rows.append([f"{Path(path).stem} (stage 1: {base.get('num_layers')} layers)",
                         str(base.get("parameters", "-")), str(stage.get("steps", "-")),
                         f"{stage.get('seconds', 0):.0f}", str(stage.get("stopped_by", "-")),
                         f"perplexity {base['heldout_perplexity']:.1f}" if "heldout_perplexity" in base else "-"])
        name = f"{Path(path).stem} (stage 2: grown)" if base else Path(path).stem
        rows.append([name, str(parameters or "-"), str(train.get("steps", "-")),
                     f"{train.get('seconds', 0):.0f}", str(train.get("stopped_by", "-")), quality])
    return markdown_table(["model", "parameters", "steps", "seconds", "stopped by", "held-out quality"], rows)


def verifier_comparison(summary: pd.DataFrame) -> str:
    """Tau of each traversal-verified variant beside the token-level variant with the same method, options,
    dataset and temperature (the same trees, verified two ways); empty when there is no such pair."""
    keys = ["method", "options", "dataset", "temperature"]
    token = summary[summary.verifier == "token_level"]
    traversal = summary[summary.verifier == "traversal"]
    pairs = traversal.merge(token, on=keys, suffixes=("_tv", ""))
    # several token-level variants with the same options (one run with several samples per prompt, say): the
    # one the traversal variant is named after (`eagle` for `eagle_tv`), if there is one
    named = pairs.variant + "_tv" == pairs.variant_tv
    has_named = named.groupby([pairs.variant_tv, pairs.dataset]).transform("any")
    pairs = pairs[named | ~has_named]
    if pairs.empty:
        return ""
    rows = [[row.variant, row.variant_tv, row.dataset, f"{row.temperature:g}", f"{row.tau:.3f}", f"{row.tau_tv:.3f}",
             f"{100 * (row.tau_tv / row.tau - 1):+.1f}%", cell(row.speedup_paired_mean, "{:.2f}"),
             cell(row.speedup_paired_mean_tv, "{:.2f}")]
            for _, row in pairs.sort_values(["temperature", "method", "dataset"]).iterrows()]
    return markdown_table(["variant", "traversal variant", "dataset", "T", "tau", "tau (traversal)", "change",
                           "speedup", "speedup (traversal)"], rows)


def samples_section(samples_csv: Path | None) -> str:
    """Tau and paired speedup per sample index (variants run with several samples per prompt)."""
    if samples_csv is None or not Path(samples_csv).is_file():
        return ""
    samples = pd.read_csv(samples_csv)
    if samples.empty:
        return ""
    rows = [[row.variant, row.dataset, f"{row.temperature:g}", str(int(row["sample"]) + 1), str(int(row.turns)),
             f"{row.tau:.3f}", cell(row.speedup_paired_mean, "{:.2f}")]
            for _, row in samples.sort_values(["variant", "dataset", "temperature", "sample"]).iterrows()]
    return markdown_table(["variant", "dataset", "T", "sample", "turns", "tau", "speedup"], rows)


def hedge_section(hedge_csv: Path | None, summary: pd.DataFrame) -> str:
    """Per hedgespec variant: each expert's share of the picks (overall and by step window), its per-step loss and
    the learner's regret against it, beside the tau of the expert's own variant (same name) in the same run."""
    if hedge_csv is None or not Path(hedge_csv).is_file():
        return ""
    hedge = pd.read_csv(hedge_csv)
    if hedge.empty:
        return ""
    windows = [column for column in hedge.columns if column.startswith("picked_steps_")]
    taus = summary.set_index(["variant", "dataset", "temperature"]).tau
    header = ["variant", "dataset", "T", "expert", "picked",
              *("steps " + column.removeprefix("picked_steps_").replace("_", "-") for column in windows),
              "loss/step", "regret/step", "tau (hedgespec)", "tau (expert alone)"]
    rows = []
    for _, row in hedge.sort_values(["temperature", "variant", "dataset", "expert"]).iterrows():
        own = taus.get((row.variant, row.dataset, row.temperature), float("nan"))
        alone = taus.get((row.expert, row.dataset, row.temperature), float("nan"))
        cells = [row.variant, row.dataset, f"{row.temperature:g}", row.expert, f"{row.picked_share:.2f}",
                 *(cell(row[column], "{:.2f}") for column in windows), f"{row.loss_per_step:.3f}",
                 f"{row.regret_per_step:+.3f}", cell(own, "{:.3f}"), cell(alone, "{:.3f}")]
        rows.append(cells)
    return markdown_table(header, rows)


def subsection(title: str, intro: str, body: str) -> list[str]:
    """A report subsection's lines: heading, what it shows, its body; none when there is no body."""
    return [f"### {title}", "", intro, "", body, ""] if body else []


def write_report(summary_csv: Path, records_paths: list[Path], figures_dir: Path, out: Path,
                 main: list[str] | None = None, metrics_paths: list[Path] | None = None,
                 samples_csv: Path | None = None, hedge_csv: Path | None = None,
                 categories_csv: Path | None = None, compare: dict[str, str] | None = None,
                 context_csv: Path | None = None) -> str:
    """Write the markdown report; figures are linked relative to the report's folder. ``compare``: {variant: the
    variant it is compared against} for the drafter-family head-to-heads (``report.compare`` in the config)."""
    summary = pd.read_csv(summary_csv, keep_default_na=False, na_values=[""])
    if summary.empty:
        raise DraftcountError(f"{summary_csv} holds no rows")
    main = main or sorted(summary.variant.unique())
    settings = run_settings(records_paths)
    main_rows = summary[summary.variant.isin(main)]
    ablation_rows = summary[~summary.variant.isin(main)]
    if not ablation_rows.empty:
        ablation_datasets = set(ablation_rows.dataset)
        defaults = summary[summary.variant.isin(set(ablation_rows.method)) & summary.dataset.isin(ablation_datasets)]
        ablation_rows = pd.concat([defaults, ablation_rows]).sort_values(["temperature", "method", "variant"])
    figure_link = Path(os.path.relpath(figures_dir, out.parent))
    warnings = warning_block(trust_warnings(summary, metrics_paths or []))
    card = regime_card(metrics_paths or [], summary)
    parts = [
        "# draftcount benchmark report",
        "",
        "Written by the workflow (rule `report`) from `tables/summary.csv`, which `python -m harness summarize` "
        "recomputes from the raw records under `raw/`. Speedups are measured against `ar` on the same prompts "
        "in the same process; see *How each number was measured* below.",
        "",
        *([warnings, ""] if warnings else []),
        *(["## Regime", "", "What decides how far these rankings transfer to another model and machine "
           "(`harness/analysis/regime.py`).", "", card, ""] if card else []),
        "## Environment and runs",
        "",
        environment_section(settings),
        "",
        "## Results",
        "",
    ]
    for temperature, rows in main_rows.groupby("temperature"):
        parts += [f"### Temperature {temperature:g}", "", results_table(rows.sort_values(["dataset", "variant"])), ""]
    if not ablation_rows.empty:
        parts += ["### Ablations and budget sweeps", "",
                  "Each variant against its method's default configuration on the same prompts.", "",
                  results_table(ablation_rows), ""]
    categories = (pd.read_csv(categories_csv) if categories_csv is not None and Path(categories_csv).is_file()
                  else pd.DataFrame())
    parts += subsection(
        "Per category",
        "Spec-Bench's view: each prompt set with several categories, by task (MT-Bench's eight categories are one "
        "task, multi-turn conversation) or by category, measured on that category's turns only "
        "(`harness/analysis/categories.py`). Rows: every variant that ran on such a set (ablations included, main "
        "variants first).",
        category_sections(categories, main) if not categories.empty else "")
    context = pd.read_csv(context_csv) if context_csv is not None and Path(context_csv).is_file() else pd.DataFrame()
    parts += subsection(
        "By context length",
        "The long-context set (`stdlib_long`: held-out files cut to buckets of prompt tokens, "
        "`harness/data/long_context.py`): tau per bucket, measured on that bucket's turns only. A drafter trained "
        "on short windows that attends over the context (eagle) against one that reads only the last state (owl).",
        context_section(context, main) if not context.empty else "")
    drafting = [variant for variant in main if (summary[summary.variant == variant].drafter_parameters > 0).any()]
    parts += subsection(
        "Drafter families",
        "Every main variant with a drafter (a draft LM, a trained drafter, a chain of them): what it buys (tau, the "
        "paired speedup with its 95% interval) beside what it costs (drafter-FLOP waste, parameters, FLOPs per "
        "decoding step), from the same runs (`harness/analysis/families.py`).",
        family_table(summary, drafting))
    parts += subsection(
        "Head to head",
        "Each configured comparison (`report.compare`: variant = against), on the same prompts in the same run: the "
        "change of tau, both speedups, and the drafters' parameter and per-step FLOP ratios (PRISM against EAGLE at "
        "equal FLOPs per step, a GTO-fine-tuned drafter against the drafter it started from, ...).",
        comparison_table(summary, compare or {}))
    parts += subsection("Polybasic: does the mid model pay?", COST_RULE_INTRO,
                        cost_rule_markdown(cost_rule_table(records_frame(records_paths), summary))
                        if "polybasic" in set(summary.method) else "")
    parts += subsection(
        "Control: `ar` against `ar`",
        "`ar_control` runs `ar` paired with `ar` exactly as every other variant is paired (same engine, same prompts, "
        "interleaved): any speedup it shows is measurement error, and it must read 1.00 within +-3%.",
        control_section(summary))
    parts += subsection(
        "Where the time goes",
        "Milliseconds per emitted token by phase (`harness/backend/phases.py`): the target's prefill and verify "
        "forwards, the drafter's forwards, verification and sampling, and the host (everything else: tree building, "
        "bookkeeping, cache edits, a model-free method's lookup). `model share` is the share of the wall time in "
        "model forwards, `host share` the share outside forwards and verification; `bound` is the speedup with zero "
        "host time on both sides, next to the measured one.",
        phase_section(summary, main))
    parts += subsection(
        "Cost structure",
        "The target's 1-token forward (from `ar`), each variant's verify forward over its tree and its drafter step, "
        "measured in the same runs. Speculation pays when a verify forward costs little more than a 1-token forward "
        "and a drafter step a small fraction of it.",
        cost_section(summary))
    parts += subsection(
        "Traversal verification",
        "The same method and options verified token by token and by Traversal Verification (leaf-to-root, "
        "sequence-level): tau should not fall, and the paper reports +2-6%.",
        verifier_comparison(summary))
    parts += subsection(
        "Several samples per prompt",
        "Variants run with several samples per prompt (`samples:`), by sample index (1 = the first).",
        samples_section(samples_csv))
    parts += subsection(
        "Drafter selection (hedgespec)",
        "Each expert's share of the learner's picks, overall and over the steps of a turn, its loss per step (1 - "
        "emitted tokens its own tree held / emitted tokens; every expert drafts every step and is scored on the "
        "verified text), and the learner's regret against it per step (negative: the learner did better). "
        "`tau (expert alone)` is the variant of that name in the same run.",
        hedge_section(hedge_csv, summary))
    parts += ["## Figures", ""]
    has_data = {"categories": not categories.empty, "context_length": not context.empty,
                "samples": samples_csv is not None and Path(samples_csv).is_file()
                and not pd.read_csv(samples_csv).empty,
                "ablation": bool(set(summary.variant) - set(main)), "budget": bool(budget_families(summary))}
    for name, caption in FIGURES.items():
        if (figures_dir / f"{name}.png").is_file() and has_data.get(name, True):
            parts += [f"**{name}** — {caption} ([PDF]({(figure_link / f'{name}.pdf').as_posix()}))", "",
                      f"![{name}]({(figure_link / f'{name}.png').as_posix()})", ""]
    training = training_section(metrics_paths or [])
    if training:
        parts += ["## Trained models and drafters", "", training, ""]
    parts += ["## How each number was measured", "", report_definitions()]
    text = "\n".join(parts)
    with atomic_path(out) as partial:
        partial.write_text(text, encoding="utf-8")
    return text
