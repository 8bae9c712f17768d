"""lyanna's view: its ablation, each switch (token-info injection, draft reuse, verification fusion, ...) against
the default, in the figure ``ablation``. Read by ``harness.analysis.views`` without importing the method's code:
torch-free, as every view (matplotlib only when drawn)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.analysis.view import Inputs, Scope, View
from methods.lyanna.claims import claims_table
from methods.lyanna.claims_section import (
    claims_section,
    draft_lm_sentence,
    regime_caveat,
)

if TYPE_CHECKING:
    import matplotlib.pyplot as plt

METHOD = "lyanna"


def plot_ablation(data: Inputs) -> plt.Figure:
    """Tau, speedup and drafter-FLOP waste of every lyanna variant on the ablation datasets (mean over them): one
    labelled row per variant (the figures' fixed order: the default first, then the others by name), one bar per
    temperature (plain at the first, hatched at the others)."""
    from harness.analysis.plot_rows import (
        group_legend,
        group_slots,
        grouped_hbars,
        hatch_map,
        label_rows,
        row_positions,
        rows_figure,
        slot_count,
    )
    from harness.analysis.plotting import (
        temperature_label,
        variant_colors,
        variant_order,
    )

    summary = data.summary
    table = summary[summary.method == METHOD]
    ablation_datasets = set(table[~table.variant.isin(data.main)].dataset)
    table = table[table.dataset.isin(ablation_datasets)] if ablation_datasets else table
    values = [("tau", "tau"), ("speedup_paired_mean", "speedup over ar"), ("drafter_flop_waste", "drafter-FLOP waste")]
    means = table.groupby(["variant", "temperature"], as_index=False)[[column for column, _ in values]].mean()
    variants = [v for v in variant_order(summary) if v in set(table.variant)]
    temperatures = sorted(summary.temperature.unique())
    slots, hatches = group_slots(means, variants, temperatures, group="temperature"), hatch_map(temperatures)
    counts = [len(groups) for groups in slots.values()]
    figure, axes = rows_figure(slot_count(counts), len(values), panel_width=2.2)
    colors = variant_colors(summary)
    for axis, (column, label) in zip(axes, values):
        grouped_hbars(axis, means, slots, column, colors, group="temperature", hatches=hatches)
        axis.set_title(label)
        axis.xaxis.grid(True)
    axes[1].axvline(1.0, color="black", linewidth=0.7, linestyle=":")
    label_rows(axes[0], variants, row_positions(counts)[1])
    handles, _ = group_legend(temperatures, hatches, "")
    figure.legend(handles, [temperature_label(t) for t in temperatures], loc="outside right upper", frameon=False)
    return figure


def _has_ablations(scope: Scope) -> bool:
    return scope.runs(METHOD, main=False)


def _ablation_rows(data: Inputs) -> bool:
    return not data.summary[(data.summary.method == METHOD) & ~data.summary.variant.isin(data.main)].empty


def _runs_lyanna(scope: Scope) -> bool:
    return scope.runs(METHOD, main=True)


VIEWS = (
    View("claims", applies=_runs_lyanna, table=claims_table, head=True, after="regime", title="The paper's claims",
         section=lambda data: claims_section(data.table("claims"), lambda: " ".join(filter(None, [
             regime_caveat(data.metrics, data.summary), draft_lm_sentence(data.metrics)]))),
         intro="Each claim of the abstract of arXiv 2602.21224 (Lyanna), judged on this run's records: our figure, "
               "its 95% interval (percentile bootstrap over prompts) and a verdict (reproduced / partly / not at this "
               "scale / contradicted / not measured), called only where the run exercised the claim (else **not "
               "exercised here**: a reuse or tree claim needs drafts deeper than one step, the deep-shape rows measure "
               "it at top_k 4, depth 5, budget 24), every seed agrees (else **not decided**) and no single prompt "
               "flips it (else **fragile**). How each is measured: `methods/lyanna/claims.py`, its columns: "
               "`docs/claims.md`. The `eagle` rows are ours, not the paper's claim."),
    View("ablation", applies=_has_ablations, has_data=_ablation_rows, figure="methods.lyanna.view:plot_ablation",
         after="depth", caption="The lyanna ablation: tau, speedup and drafter-FLOP waste of each switch against the "
                                "default, one row per variant (plain bars: T = 0, hatched: T = 1)."),
)
