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

from harness.atomic import atomic_path
from harness.errors import DraftcountError
from harness.figures import FIGURES
from harness.records import read_records

MAIN_COLUMNS = [
    ("tokens_per_s", "tokens/s", "{:.1f}"),
    ("speedup_paired_mean", "speedup", "{:.2f}"),
    ("speedup_ci", "95% interval", "{}"),
    ("speedup_total", "speedup (totals)", "{:.2f}"),
    ("tau", "tau", "{:.2f}"),
    ("accepted_per_step", "accepted/step", "{:.2f}"),
    ("token_waste", "token waste", "{:.2f}"),
    ("drafter_flop_waste", "drafter-FLOP waste", "{:.2f}"),
    ("verify_waste", "verify waste", "{:.2f}"),
    ("drafter_flops_per_accepted", "drafter MFLOPs/accepted", "{:.1f}"),
    ("efficiency", "efficiency", "{:.2f}"),
]
MEGA_COLUMNS = {"drafter_flops_per_accepted"}

DEFINITIONS = """\
- **tokens/s**: new tokens (trimmed at EOS, counted the same way for every method) over the wall time of the
  generation, prefill included; warm-up generations are not timed. The timer is named in every raw record
  (`timer`; `perf_counter` on CPU, with device synchronisation on GPU).
- **speedup**: for every prompt, the method's tokens/s over `ar`'s tokens/s on the same prompt in the same
  process (the two run interleaved, prompt by prompt, with the same sampling settings, seeds, dtype and
  device); the table gives the mean of these paired ratios with a percentile bootstrap 95% interval
  (2,000 resamples, fixed seed), and the ratio of total tokens/s (**speedup (totals)**).
- **tau**: new tokens per target forward pass, the bonus token included (the convention of EAGLE,
  Spec-Bench and SGLang). A method that runs the target twice per step (`lyanna` with `verify_fusion=off`)
  can have tau below 1. **accepted/step**: accepted draft tokens per verification step (no bonus token;
  gpt-fast's convention).
- **token waste**: 1 - accepted draft tokens / draft tokens sent to verification.
- **drafter-FLOP waste**: 1 - drafter FLOPs whose output reached an accepted token or a state the drafter
  reused / all drafter FLOPs. FLOPs are analytic: 2 x parameters x tokens processed, plus attention.
- **verify waste**: verified tokens that were neither an accepted draft nor a step's root / all verified tokens.
- **drafter MFLOPs/accepted**: drafter FLOPs (all of them) per accepted draft token, in millions.
- **efficiency**: speedup / tau, how much of the bound speedup = tau (free, perfect drafting) was realised.
"""


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
    for column in MEGA_COLUMNS:
        table[column] = table[column] / 1e6
    header = ["variant", "dataset", "T"] + [label for _, label, _ in MAIN_COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in table.iterrows():
        cells = [row.variant, row.dataset, f"{row.temperature:g}"]
        cells += [_cell(row[column], template) for column, _, template in MAIN_COLUMNS]
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
    parts += ["## How each number was measured", "", DEFINITIONS]
    text = "\n".join(parts)
    with atomic_path(out) as partial:
        partial.write_text(text, encoding="utf-8")
    return text
