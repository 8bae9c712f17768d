"""The models table's size and cost columns: each trained model's parameters by component (the training metrics'
``parameter_components``, ``harness.training.drafter_contract``), a chain drafter's parameters as its runs count them
(`polybasic`: its mid LM and the draft LM it drafts with, as the summary's ``drafter_parameters``), and each drafter's
FLOPs per draft token in its main variant's runs (the summary's ``drafter_flops_per_draft``). Torch-free."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

DRAFT_LM = "draft"  # the draft LM's metrics file (sd's drafter, polybasic's last stage, pard's start)
CHAINS = {"polybasic": "mid LM"}  # a drafter that drafts with the draft LM behind it -> what its own model is


def model_name(path: Path) -> str:
    """A metrics file's model: ``drafter-eagle.json`` -> ``drafter-eagle``."""
    return Path(path).stem


def main_variant(name: str) -> str | None:
    """The bench variant a model drafts for under its own name: ``drafter-eagle`` -> ``eagle``, the draft LM ->
    ``sd``; None for the target."""
    if name == DRAFT_LM:
        return "sd"
    return name.removeprefix("drafter-") if name.startswith("drafter-") else None


def millions(count: float) -> str:
    return f"{count / 1e6:.3f}M"


def own_parameters(metrics: dict) -> int | None:
    parameters = metrics.get("trainable_parameters") or metrics.get("parameters")
    return int(parameters) if parameters else None


def chained_parameters(metrics: dict, draft: dict | None) -> tuple[int | None, dict[str, int]]:
    """A model's parameter count and components as its runs count it: a chain drafter's own model plus the draft
    LM (``draft``'s metrics); any other model's own count and components."""
    own, components = own_parameters(metrics), dict(metrics.get("parameter_components") or {})
    stage = CHAINS.get(str(metrics.get("method")))
    if stage is None or own is None or draft is None or own_parameters(draft) is None:
        return own, components
    return own + own_parameters(draft), {stage: own, "draft LM": own_parameters(draft)}


def components_cell(components: dict[str, int]) -> str:
    """``backbone 3.872M, injection 1.049M``; ``-`` where the metrics predate the count."""
    return ", ".join(f"{name} {millions(count)}" for name, count in components.items()) or "-"


def flops_per_draft_cell(summary: pd.DataFrame | None, variant: str | None) -> str:
    """The variant's drafter MFLOPs per draft token at each temperature of the run (the mean over its prompt sets,
    ``-`` at one it did not run or drafted nothing at), as ``temperatures_label`` lists them; ``-`` without any."""
    if summary is None or variant is None or "drafter_flops_per_draft" not in summary:
        return "-"
    means = summary[summary.variant == variant].groupby("temperature").drafter_flops_per_draft.mean()
    cells = [f"{means[t] / 1e6:.3g}" if t in means.index and np.isfinite(means[t]) else "-"
             for t in sorted(summary.temperature.unique())]
    return "-" if set(cells) == {"-"} else " / ".join(cells)


def temperatures_label(summary: pd.DataFrame | None) -> str:
    """The column's temperatures, as the cells list them: ``T = 0 / 1``."""
    if summary is None or "temperature" not in summary or summary.empty:
        return ""
    return " (T = " + " / ".join(f"{value:g}" for value in sorted(summary.temperature.unique())) + ")"
