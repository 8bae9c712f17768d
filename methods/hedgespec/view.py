"""hedgespec's view: which expert the learner picked, when in a turn, and what it cost (the report's *Drafter
selection* section and ``tables/hedgespec.csv``). Read by ``harness.analysis.views`` without importing the
method's code: torch-free, as every view."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.tables import cell, markdown_table
from harness.analysis.view import Inputs, Scope, View

PICK_WINDOWS = ((1, 4), (5, 8), (9, 16), (17, 32), (33, None))  # verification steps of a turn, 1-based
HEDGE_COLUMNS = ["variant", "dataset", "temperature", "expert", "steps", "picked_share", "loss_per_step",
                 "learner_loss_per_step", "regret_per_step"] + [
    f"picked_steps_{low}_{high or 'on'}" for low, high in PICK_WINDOWS]


def hedge_table(frame: pd.DataFrame) -> pd.DataFrame:
    """For an online drafter-selection method (hedgespec's counters): per variant x dataset x temperature x expert,
    the share of steps it was picked, its mean per-step loss (1 - emitted tokens its tree held / emitted), the
    learner's, the learner's regret against it per step, and its share of the picks over steps 1-4, 5-8, 9-16,
    17-32 and 33 on of a turn (which drafter was chosen as the turn went on)."""
    methods = frame[(frame.role == "method") & frame.extra.map(lambda extra: "hedge_learner_loss" in extra)]
    rows = []
    for (variant, dataset, temperature), group in methods.groupby(["variant", "dataset", "temperature"]):
        experts = list(group.expert_names.iloc[0])
        picks = [[experts[int(pick)] for pick in trace.get("hedge_pick", [])] for trace in group.trace]
        steps = sum(len(turn) for turn in picks)
        learner = sum(extra["hedge_learner_loss"] for extra in group.extra) / max(steps, 1)
        for name in experts:
            loss = sum(extra.get(f"hedge_loss:{name}", 0.0) for extra in group.extra) / max(steps, 1)
            row = {"variant": variant, "dataset": dataset, "temperature": temperature, "expert": name,
                   "steps": steps, "picked_share": sum(turn.count(name) for turn in picks) / max(steps, 1),
                   "loss_per_step": loss, "learner_loss_per_step": learner, "regret_per_step": learner - loss}
            for low, high in PICK_WINDOWS:
                window = [pick for turn in picks for pick in turn[low - 1:high]]
                row[f"picked_steps_{low}_{high or 'on'}"] = window.count(name) / len(window) if window else np.nan
            rows.append(row)
    return pd.DataFrame(rows, columns=HEDGE_COLUMNS)



def hedge_section(hedge: pd.DataFrame, summary: pd.DataFrame) -> str:
    """Per hedgespec variant: each expert's share of the picks (overall and by step window), its per-step loss and
    the learner's regret against it, beside the tau of the expert's own variant (same name) in the same run."""
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


def _section(data: Inputs) -> str:
    return hedge_section(data.table("hedgespec"), data.summary)


def _runs_hedgespec(scope: Scope) -> bool:
    return scope.runs("hedgespec")


VIEWS = (
    View("hedgespec", applies=_runs_hedgespec, table=hedge_table, after="samples",
         title="Drafter selection (hedgespec)", section=_section,
         intro="Each expert's share of the learner's picks, overall and over the steps of a turn, its loss per step "
               "(1 - emitted tokens its own tree held / emitted tokens; every expert drafts every step and is scored "
               "on the verified text), and the learner's regret against it per step (negative: the learner did "
               "better). `tau (expert alone)` is the variant of that name in the same run."),
)
