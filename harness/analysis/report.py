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
from harness.analysis.figures import FIGURES
from harness.analysis.metrics import report_definitions, report_metrics
from harness.store.records import read_records



def _cell(value: Any, template: str) -> str:
    if isinstance(value, float) and pd.isna(value):
        return "-"
    return template.format(value)


def results_table(summary: pd.DataFrame) -> str:
    """A markdown table of the summary rows given, one row per variant x dataset x temperature."""
    table = summary.copy()
    table["speedup_ci"] = [
        "-" if pd.isna(low) else f"[{low:.2f}, {high:.2f}]"
        for low, high in zip(table.speedup_ci_low, table.speedup_ci_high)]
    columns = report_metrics()
    header = ["variant", "dataset", "T"] + [metric.label for metric in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in table.iterrows():
        cells = [row.variant, row.dataset, f"{row.temperature:g}"]
        cells += [_cell(row[metric.name] / metric.scale if metric.scale != 1 else row[metric.name], metric.fmt)
                  for metric in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
    lines = ["| model | parameters | steps | seconds | stopped by | held-out quality |", "|---|---|---|---|---|---|"]
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
        name = Path(path).stem
        lines.append(f"| {name} | {parameters or '-'} | {train.get('steps', '-')} | "
                     f"{train.get('seconds', 0):.0f} | {train.get('stopped_by', '-')} | {quality} |")
    return "\n".join(lines)


def write_report(summary_csv: Path, records_paths: list[Path], figures_dir: Path, out: Path,
                 main: list[str] | None = None, metrics_paths: list[Path] | None = None) -> str:
    """Write the markdown report; figures are linked relative to the report's folder."""
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
    parts = [
        "# draftcount benchmark report",
        "",
        "Written by the workflow (rule `report`) from `tables/summary.csv`, which `python -m harness summarize` "
        "recomputes from the raw records under `raw/`. Speedups are measured against `ar` on the same prompts "
        "in the same process; see *How each number was measured* below.",
        "",
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
    parts += ["## Figures", ""]
    for name, caption in FIGURES.items():
        if (figures_dir / f"{name}.png").is_file():
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
