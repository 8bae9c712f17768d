"""lyanna's view: its ablation, each switch (token-info injection, draft reuse, verification fusion, ...) against
the default, in the figure ``ablation``. Read by ``harness.analysis.views`` without importing the method's code:
torch-free, as every view (matplotlib only when drawn)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from harness.analysis.view import Inputs, Scope, View
from methods.lyanna.claims import claims_section, claims_table, regime_caveat

if TYPE_CHECKING:
    import matplotlib.pyplot as plt

METHOD = "lyanna"


def plot_ablation(data: Inputs) -> plt.Figure:
    """Tau, speedup and drafter-FLOP waste of every lyanna variant on the ablation datasets, plain bars at the first
    temperature, hatched at the others."""
    from harness.analysis.plotting import plt, temperature_label, variant_colors, variant_order

    summary = data.summary
    table = summary[summary.method == METHOD]
    ablation_datasets = set(table[~table.variant.isin(data.main)].dataset)
    table = table[table.dataset.isin(ablation_datasets)] if ablation_datasets else table
    colors = variant_colors(summary)
    variants = [v for v in variant_order(summary) if v in set(table.variant)]
    values = [("tau", "tau"), ("speedup_paired_mean", "speedup over ar"), ("drafter_flop_waste", "drafter-FLOP waste")]
    temperatures = sorted(summary.temperature.unique())
    figure, axes = plt.subplots(1, len(values), figsize=(2.6 * len(values) + 1.2, 2.6), squeeze=False)
    width = 0.8 / max(len(temperatures), 1)
    for axis, (column, label) in zip(axes[0], values):
        for index, temperature in enumerate(temperatures):
            rows = table[table.temperature == temperature].groupby("variant")[column].mean().reindex(variants)
            positions = np.arange(len(variants)) + (index - (len(temperatures) - 1) / 2) * width
            axis.bar(positions, rows, width, color=[colors[v] for v in variants], hatch="" if index == 0 else "///",
                     edgecolor="white", linewidth=0.3)
        axis.set_xticks(np.arange(len(variants)), variants, rotation=40, ha="right")
        axis.set_title(label)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor="0.6", hatch="" if i == 0 else "///", edgecolor="white")
               for i in range(len(temperatures))]
    axes[0][-1].legend(handles, [temperature_label(t) for t in temperatures], loc="upper left",
                       bbox_to_anchor=(1.0, 1.0), frameon=False)
    return figure


def _has_ablations(scope: Scope) -> bool:
    return scope.runs(METHOD, main=False)


def _ablation_rows(data: Inputs) -> bool:
    return not data.summary[(data.summary.method == METHOD) & ~data.summary.variant.isin(data.main)].empty


def _runs_lyanna(scope: Scope) -> bool:
    return scope.runs(METHOD, main=True)


VIEWS = (
    View("claims", applies=_runs_lyanna, table=claims_table, head=True, after="regime", title="The paper's claims",
         section=lambda data: claims_section(data.table("claims"), lambda: regime_caveat(data.metrics, data.summary)),
         intro="Each claim of the abstract of arXiv 2602.21224 (Lyanna), judged on this run's records: our figure, "
               "its 95% interval (percentile bootstrap over prompts) and a verdict (reproduced / partly / not at this "
               "scale / contradicted / not measured). How each is measured: `methods/lyanna/claims.py`. The last rows "
               "are ours, not the paper's claim."),
    View("ablation", applies=_has_ablations, has_data=_ablation_rows, figure="methods.lyanna.view:plot_ablation",
         after="depth", caption="The lyanna ablation: tau, speedup and drafter-FLOP waste of each switch against the "
                                "default (plain bars: T = 0, hatched: T = 1)."),
)
