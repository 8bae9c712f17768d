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

from harness.analysis.metrics import report_definitions
from harness.analysis.model_sizes import (
    DRAFT_LM, chained_parameters, components_cell, flops_per_draft_cell, main_variant, model_name, temperatures_label,
)
from harness.analysis.sections import results_table
from harness.analysis.tables import markdown_table
from harness.analysis.trust import trust_warnings, warning_block
from harness.analysis.view import read_inputs
from harness.analysis.views import all_views, embedded_figures
from harness.errors import DraftcountError
from harness.store.atomic import atomic_path
from harness.store.provenance import source_line
from harness.store.records import read_records


def run_settings(records_paths: list[Path]) -> dict[str, Any]:
    """What every run shared (environment, sampling, lengths) and what the models were, from the records."""
    first: dict[str, Any] = {}
    prompts: dict[str, set[str]] = {}
    revisions, models, drafters, source = set(), {}, {}, None
    for path in records_paths:
        for record in read_records(path):
            first = first or record
            prompts.setdefault(record["dataset"], set()).add(record["prompt_id"])
            revisions.add(record.get("git_revision"))
            for role in ("target", "draft"):
                if record["models"].get(role):
                    models[role] = (record["models"][role], record["models"].get(f"{role}_parameters"))
            source = source or record["models"].get("target_source")
            if record["role"] == "method" and record["models"].get("drafter"):
                details = record.get("method_details", {})
                drafters[record["variant"]] = (record["models"]["drafter"], details.get("drafter_parameters"),
                                               details.get("draft_vocab"), details.get("target_vocab"))
    if not first:
        raise DraftcountError("no records to report on")
    return {"first": first, "prompts": {name: len(ids) for name, ids in sorted(prompts.items())},
            "revisions": sorted(str(revision) for revision in revisions), "models": models, "drafters": drafters,
            "target_source": source}


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
    if settings.get("target_source"):
        lines.append(f"- target imported: {source_line(settings['target_source'])}")
    for variant, (path, parameters, vocab, target_vocab) in sorted(settings["drafters"].items()):
        size = f", {parameters / 1e6:.3f}M trainable parameters" if parameters else ""
        lines.append(f"- drafter of `{variant}`: `{path}`{size}{vocabulary_note(vocab, target_vocab)}")
    return "\n".join(lines)


def vocabulary_note(vocab: int | None, target_vocab: int | None) -> str:
    """What a drafter's logits cover, for its line in the models list (nothing when its run did not say)."""
    if not vocab or not target_vocab:
        return ""
    if vocab == target_vocab:
        return f", the whole {target_vocab}-token vocabulary"
    return f", draft vocabulary {vocab} of {target_vocab} tokens"


def trained_on_cell(metrics: dict) -> str:
    """The machine a model trained on, for the models table: the CPU type and torch's kernel path (fp32 training is
    reproducible on one CPU type only), or the GPU; ``-`` where its metrics predate the record."""
    machine = metrics.get("trained_on") or {}
    if not machine:
        return "-"
    if str(machine.get("device", "cpu")).startswith("cuda") and machine.get("gpus"):
        return str(machine["gpus"][0] if isinstance(machine["gpus"], list) else machine["gpus"])
    kernels = machine.get("cpu_kernels")
    return f"{machine.get('cpu', '?')}{f' ({kernels})' if kernels else ''}"


def training_section(metrics_paths: list[Path], summary: pd.DataFrame | None = None) -> str:
    """One row per trained model or drafter: parameters (in all, as its runs count them, and by component), steps,
    seconds, its held-out quality and, from ``summary``, its main variant's drafter FLOPs per draft token."""
    if not metrics_paths:
        return ""
    rows = []
    everything = {model_name(path): json.loads(Path(path).read_text()) for path in metrics_paths}
    for path in metrics_paths:
        metrics = everything[model_name(path)]
        if metrics.get("imported"):  # not trained here: the environment and the regime card say what it is
            continue
        train = metrics.get("train") or metrics.get("training") or {}
        parameters, components = chained_parameters(metrics, everything.get(DRAFT_LM))
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
                         str(base.get("parameters", "-")), "-", str(stage.get("steps", "-")), training_tokens(stage),
                         training_flops(stage),
                         f"{stage.get('seconds', 0):.0f}", str(stage.get("stopped_by", "-")),
                         f"perplexity {base['heldout_perplexity']:.1f}" if "heldout_perplexity" in base else "-",
                         "-", "-", trained_on_cell(metrics)])
        name = f"{Path(path).stem} (stage 2: grown)" if base else Path(path).stem
        rows.append([name, str(parameters or "-"), components_cell(components), str(train.get("steps", "-")),
                     training_tokens(train), training_flops(train),
                     f"{train.get('seconds', 0):.0f}", str(train.get("stopped_by", "-")), quality,
                     vocabulary_note(metrics.get("draft_vocab"), metrics.get("target_vocab")).lstrip(", ") or "-",
                     flops_per_draft_cell(summary, main_variant(model_name(path))), trained_on_cell(metrics)])
    return markdown_table(["model", "parameters", "parameters by component", "steps", "training tokens",
                           "training FLOPs", "seconds", "stopped by", "held-out quality", "logits over",
                           f"drafter MFLOPs per draft token{temperatures_label(summary)}", "trained on"], rows)


def training_tokens(train: dict) -> str:
    """The supervised target positions a model trained on (the kit's count: steps x batch x window, a
    training-time-test unroll counting a position once), or ``-`` where its metrics predate the count."""
    return f"{train['tokens']:,}" if isinstance(train.get("tokens"), int) else "-"


def training_flops(train: dict) -> str:
    """Its training FLOPs as counted (``harness.training.flops``: forwards, backwards, unrolls and the target's
    feature forwards), or ``-`` where its metrics predate the count."""
    return f"{train['flops']:.3g}" if train.get("flops") else "-"


def write_report(tables_dir: Path, records_paths: list[Path], figures_dir: Path, out: Path,
                 main: list[str] | None = None, metrics_paths: list[Path] | None = None,
                 compare: dict[str, str] | None = None, published: dict[str, dict] | None = None) -> str:
    """Write the markdown report from the tables ``summarize --tables-dir`` wrote (the records give the environment)
    and the figures drawn into ``figures_dir``, linked relative to the report's folder: the warnings, the views'
    top sections, the environment, the main results per temperature, every view's section that has a body, the
    figures with data, the trained models. ``main``: the variants run on every dataset (default: all);
    ``compare``: {variant: the variant it is compared against} (``report.compare`` in the config);
    ``published``: {variant: its system's own figures} (``report.published``)."""
    data = read_inputs(tables_dir, main, metrics_paths, compare, published)
    summary, settings = data.summary, run_settings(records_paths)
    views = all_views()
    warnings = warning_block(trust_warnings(summary, data.metrics))
    parts = [
        "# draftcount benchmark report",
        "",
        "Written by the workflow (rule `report`) from `tables/summary.csv`, which `python -m harness summarize` "
        "recomputes from the raw records under `raw/`. Speedups are measured against `ar` on the same prompts "
        "in the same process; see *How each number was measured* below.",
        "",
        *([warnings, ""] if warnings else []),
        *(line for view in views if view.head for line in view.markdown(data)),
        "## Environment and runs",
        "",
        environment_section(settings),
        "",
        "## Results",
        "",
    ]
    for temperature, rows in summary[summary.variant.isin(data.main)].groupby("temperature"):
        parts += [f"### Temperature {temperature:g}", "", results_table(rows.sort_values(["dataset", "variant"])), ""]
    parts += [line for view in views if not view.head for line in view.markdown(data)]
    parts += ["## Figures", ""]
    link = Path(os.path.relpath(figures_dir, out.parent))
    for view in embedded_figures(data, figures_dir):
        parts += [f"**{view.name}** — {view.caption} ([PDF]({(link / f'{view.name}.pdf').as_posix()}))", "",
                  f"![{view.name}]({(link / f'{view.name}.png').as_posix()})", ""]
    training = training_section(data.metrics, summary)
    if training:
        parts += ["## Trained models and drafters", "", training, ""]
    parts += ["## How each number was measured", "", report_definitions()]
    text = "\n".join(parts)
    with atomic_path(out) as partial:
        partial.write_text(text, encoding="utf-8")
    return text
