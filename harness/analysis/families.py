"""The report's drafter-family view: what each drafter costs (parameters, FLOPs per step, FLOP waste) beside what it
buys (tau, paired speedup), and the configured head-to-head comparisons (``report.compare``: PRISM against EAGLE at
equal per-step compute, a GTO-fine-tuned drafter against the same drafter without it, ...), each on the same
prompts in the same run.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from harness.analysis.tables import cell, markdown_table


def parse_comparisons(text: str | None) -> dict[str, str]:
    """``"prism=eagle,eagle_gto=eagle"`` -> {variant: the variant it is compared against}."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        variant, sep, baseline = item.partition("=")
        if not sep or not variant.strip() or not baseline.strip():
            raise ValueError(f"a comparison is VARIANT=BASELINE, not {item!r}")
        pairs[variant.strip()] = baseline.strip()
    return pairs


def speedup_cell(row: pd.Series) -> str:
    """The paired speedup with its 95% interval, e.g. ``1.42 [1.30, 1.55]``."""
    if pd.isna(row.get("speedup_paired_mean", float("nan"))):
        return "-"
    return (f"{row.speedup_paired_mean:.2f} [{cell(row.get('speedup_ci_low', float('nan')), '{:.2f}')}, "
            f"{cell(row.get('speedup_ci_high', float('nan')), '{:.2f}')}]")


def drafting_variants(summary: pd.DataFrame, variants: list[str]) -> list[str]:
    """Those of ``variants`` (in their order) that run a drafter: a draft LM, a trained drafter, a chain of them."""
    return [variant for variant in variants if (summary[summary.variant == variant].drafter_parameters > 0).any()]


def family_table(summary: pd.DataFrame, variants: list[str]) -> str:
    """One row per variant (of ``variants``, in that order) x dataset x temperature: tau, paired speedup with
    interval, drafter-FLOP waste, drafter parameters, draft vocabulary and drafter FLOPs per step; empty when none
    of them ran."""
    rows = summary[summary.variant.isin(variants)].copy()
    if rows.empty:
        return ""
    rows["order"] = rows.variant.map({name: index for index, name in enumerate(variants)})
    lines = [[row.variant, row.dataset, f"{row.temperature:g}", f"{row.tau:.3f}", speedup_cell(row),
              cell(row.get("drafter_flop_waste", float("nan")), "{:.2f}"),
              cell(row.get("drafter_parameters", float("nan")) / 1e6, "{:.3f}"),
              cell(row.get("draft_vocab", float("nan")) or float("nan"), "{:.0f}"),
              cell(row.get("drafter_flops_per_step", float("nan")) / 1e6, "{:.2f}"),
              cell(row.get("drafter_forwards_per_step", float("nan")), "{:.2f}"),
              cell(row.get("drafter_forwards_per_token", float("nan")), "{:.2f}")]
             for _, row in rows.sort_values(["temperature", "dataset", "order"]).iterrows()]
    return markdown_table(["variant", "dataset", "T", "tau", "speedup [95% CI]", "drafter-FLOP waste",
                           "drafter params (M)", "draft vocab", "drafter MFLOPs/step", "drafter fwd/step",
                           "drafter fwd/token"],
                          lines)


def data_source_rows(summary: pd.DataFrame, main: list[str]) -> pd.DataFrame:
    """Each variant whose drafter learnt from the target's own continuations (``drafter_data`` regenerated) joined
    with its method's main variant (suffix ``_base``) on dataset and temperature, when that one learnt from the
    corpus."""
    if "drafter_data" not in summary:
        return pd.DataFrame()
    regenerated = summary[summary.drafter_data == "regenerated"]
    corpus = summary[summary.variant.isin(main) & (summary.drafter_data == "corpus")]
    joined = regenerated.merge(corpus, on=["method", "dataset", "temperature"], suffixes=("", "_base"))
    return joined.assign(tau_change=joined.tau / joined.tau_base - 1) if not joined.empty else joined


def data_source_table(summary: pd.DataFrame, main: list[str]) -> str:
    """Corpus against regenerated training data, per method, dataset and temperature; empty without such pairs."""
    joined = data_source_rows(summary, main)
    if joined.empty:
        return ""
    lines = [[row.method, row.variant_base, row.variant, row.dataset, f"{row.temperature:g}", f"{row.tau_base:.3f}",
              f"{row.tau:.3f}", f"{100 * row.tau_change:+.1f}%", speedup_cell(base_view(row)),
              speedup_cell(row)]
             for _, row in joined.sort_values(["temperature", "method", "dataset"]).iterrows()]
    return markdown_table(["method", "corpus", "regenerated", "dataset", "T", "tau (corpus)", "tau (regenerated)",
                           "tau change", "speedup (corpus) [95% CI]", "speedup (regenerated) [95% CI]"], lines)


def base_view(row: pd.Series) -> pd.Series:
    """A joined row's ``_base`` columns under their own names (for ``speedup_cell``)."""
    return pd.Series({key[: -len("_base")]: value for key, value in row.items() if key.endswith("_base")})


def plot_forwards(data) -> "object":
    """Drafter forwards per decoding step beside tau, one row per variant with a drafter (the figures' fixed order),
    one marker per temperature (mean over datasets): a block drafter reaches its tau in one forward, a head in one
    per depth, a draft LM in one per token."""
    from harness.analysis.plot_rows import label_rows, row_positions, rows_figure, slot_count
    from harness.analysis.plotting import figure_legend, temperature_label, variant_colors, variant_order

    summary = data.summary[data.summary.drafter_parameters > 0]
    colors = variant_colors(data.summary)
    variants = [variant for variant in variant_order(data.summary) if variant in set(summary.variant)]
    temperatures = sorted(summary.temperature.unique())
    markers = {temperature: marker for temperature, marker in zip(temperatures, "os^v")}
    _, centres = row_positions([1] * len(variants))
    figure, axes = rows_figure(slot_count([1] * len(variants)), 2, panel_width=2.4)
    means = summary.groupby(["variant", "temperature"])[["drafter_forwards_per_step", "tau"]].mean()
    for axis, column, label in zip(axes, ("drafter_forwards_per_step", "tau"),
                                   ("drafter forwards per step", "tau (tokens per step)")):
        for index, temperature in enumerate(temperatures):
            offset = 0.5 * (index - (len(temperatures) - 1) / 2)
            for variant, centre in zip(variants, centres):
                if (variant, temperature) in means.index:
                    axis.plot(means.at[(variant, temperature), column], centre + offset, markers[temperature],
                              color=colors[variant], markersize=3.5,
                              markerfacecolor=colors[variant] if index == 0 else "white")
            axis.plot([], [], markers[temperature], color="0.35", markerfacecolor="0.35" if index == 0 else "white",
                      label=temperature_label(temperature))
        axis.set_xlabel(label)
        axis.xaxis.grid(True)
    axes[0].set_xlim(left=0)
    label_rows(axes[0], variants, centres)
    figure_legend(figure, axes[:1])
    return figure


def comparison_rows(summary: pd.DataFrame, comparisons: Mapping[str, str]) -> pd.DataFrame:
    """Each compared variant's rows joined with its baseline variant's on dataset and temperature (suffix ``_base``);
    the relative change of tau and of the paired speedup, and the parameter and per-step FLOP ratios."""
    keys = ["dataset", "temperature"]
    frames = []
    for variant, baseline in comparisons.items():
        mine = summary[summary.variant == variant]
        theirs = summary[summary.variant == baseline]
        if mine.empty or theirs.empty:
            continue
        frames.append(mine.merge(theirs, on=keys, suffixes=("", "_base")))
    if not frames:
        return pd.DataFrame()
    joined = pd.concat(frames, ignore_index=True)
    joined["tau_change"] = joined.tau / joined.tau_base - 1
    joined["speedup_change"] = joined.speedup_paired_mean / joined.speedup_paired_mean_base - 1
    joined["parameter_ratio"] = joined.drafter_parameters / joined.drafter_parameters_base.where(
        joined.drafter_parameters_base > 0)
    joined["flops_per_step_ratio"] = joined.drafter_flops_per_step / joined.drafter_flops_per_step_base.where(
        joined.drafter_flops_per_step_base > 0)
    return joined


def comparison_table(summary: pd.DataFrame, comparisons: Mapping[str, str]) -> str:
    """The head-to-head table of ``comparisons`` ({variant: baseline}); empty when no pair ran."""
    joined = comparison_rows(summary, comparisons)
    if joined.empty:
        return ""
    lines = [[row.variant, row.variant_base, row.dataset, f"{row.temperature:g}", f"{row.tau:.3f}",
              f"{row.tau_base:.3f}", f"{100 * row.tau_change:+.1f}%", speedup_cell(row),
              cell(row.speedup_paired_mean_base, "{:.2f}"), cell(row.parameter_ratio, "{:.2f}x"),
              cell(row.flops_per_step_ratio, "{:.2f}x")]
             for _, row in joined.sort_values(["variant", "temperature", "dataset"]).iterrows()]
    return markdown_table(["variant", "against", "dataset", "T", "tau", "tau (against)", "tau change",
                           "speedup [95% CI]", "speedup (against)", "params ratio", "FLOPs/step ratio"], lines)


def published_table(summary: pd.DataFrame, published: Mapping[str, Mapping[str, object]]) -> str:
    """Each variant's tau and paired speedup per dataset at T = 0 and T = 1 beside its system's own published
    speedups (``report.published``: source, setting, speedup_t0, speedup_t1); empty when none of them ran."""
    lines = []
    for variant, paper in published.items():
        rows = summary[summary.variant == variant]
        for dataset in sorted(rows.dataset.unique()):
            ours = {float(row.temperature): row for _, row in rows[rows.dataset == dataset].iterrows()}
            lines.append([variant, dataset, *(
                f"{ours[t].tau:.2f} / {speedup_cell(ours[t])}" if t in ours else "-" for t in (0.0, 1.0)),
                *(cell(paper.get(key), "{:.2f}x") for key in ("speedup_t0", "speedup_t1")),
                f"{paper['source']}" + (f" ({paper['setting']})" if paper.get("setting") else "")])
    if not lines:
        return ""
    return markdown_table(["variant", "dataset", "ours T = 0: tau / speedup", "ours T = 1: tau / speedup",
                           "published T = 0", "published T = 1", "published by"], lines)
