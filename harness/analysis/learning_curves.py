"""Learning curves (study `learning_curves`): every model-based drafter family retrained at fractions and multiples
of the main comparison's budget of supervised target positions, read from the drafters' training metrics (the
learning-rate study, which reads the same metrics at one budget: ``harness.analysis.lr_study``). Per
drafter: its family, the rung (its budget over the family's main budget), the positions and training FLOPs the kit
counted, and its held-out top-1 agreement per draft step (the kit's contract, docs/extending.md). The ranking's
stability from rung to rung is Kendall's tau between adjacent rungs' orders of the families (by step-1 agreement).

Given the rungs' chain runs (``--records``, ``--chains``: every rung's drafter benchmarked as a chain of one
length, paired with `ar`), the table also holds each rung's tau and paired speedup per temperature (drafter quality
without tree search), and the stability is also read by chain tau. Given the rungs' runs at their own calibrated
shapes (``--calibrated``, ``--calibrated-dataset``: rung 1 is the main variant's run), it holds each rung's chosen
shape, accepted drafts per step, tau and paired speedup (the regime each budget reaches). Torch-free.

    python -m harness learning-curves --metrics work/metrics/drafter-*.json \
        --rungs eagle=eagle:1,eagle_lc05=eagle:0.5,... --out results/studies/tables/learning_curves.csv \
        --figure results/studies/figures/learning_curves \
        --chains eagle=eagle_chain,eagle_lc05=eagle_lc05_chain,... --records results/raw/*_chain/*.jsonl
    python -m harness learning-curves --table results/studies/tables/learning_curves.csv \
        --figure results/studies/figures/learning_curves      # the figure again, from the written tables only
"""

from __future__ import annotations

import argparse
import json
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.curve_fit import fit_table
from harness.analysis.summary import records_frame, summarize, write_table
from harness.errors import DraftcountError

AGREEMENT = "heldout_top1_agreement_by_step"  # harness.training.drafters.AGREEMENT (torch-free here)
DRAFT_LM = "draft LM"  # the family name of sd's draft LM's rungs (its metrics: a zoo LM's, not a drafter's)
COLUMNS = ["family", "drafter", "rung", "tokens", "flops", "agreement_step1", "agreement_mean", "agreement_steps",
           "agreement_by_step"]
MEAN_STEPS = 3  # the mean agreement averages at most the first three draft steps, the same ones for every family
STABILITY_COLUMNS = ["rung", "next_rung", "families", "kendall_tau"]
CHAIN_FIGURES = {"chain_tau": "chain tau", "chain_speedup": "chain paired speedup over ar",
                 "calibrated_speedup": "paired speedup at its calibrated shape"}  # column stem -> the panel's title


def curve_rows(metrics: dict[str, dict], rungs: dict[str, tuple[str, float]]) -> pd.DataFrame:
    """One row per drafter: ``metrics`` {drafter: its training metrics}, ``rungs`` {drafter: (family, rung)}."""
    rows = []
    for drafter, (family, rung) in rungs.items():
        if drafter not in metrics:
            raise DraftcountError(f"learning curves: no metrics for drafter {drafter!r}")
        found = metrics[drafter]
        agreement = [float(value) for value in found.get(AGREEMENT) or []]
        if not agreement:
            raise DraftcountError(f"learning curves: drafter {drafter!r} recorded no {AGREEMENT} (train it with "
                                  f"--heldout)")
        train = found.get("train") or {}
        rows.append({"family": family, "drafter": drafter, "rung": rung, "tokens": train.get("tokens", np.nan),
                     "flops": train.get("flops", np.nan), "agreement_step1": agreement[0],
                     "agreement_by_step": json.dumps(agreement)})
    curves = pd.DataFrame(rows, columns=[column for column in COLUMNS if not column.startswith("agreement_")]
                          + ["agreement_step1", "agreement_by_step"])
    return with_mean_agreement(curves).sort_values(["family", "rung"], ignore_index=True)[COLUMNS]


def draft_lm_rows(metrics: dict[str, dict], rungs: dict[str, float]) -> pd.DataFrame:
    """The draft LM's rungs (``rungs`` {model name: rung}; ``metrics`` its training metrics, work/metrics/<name>.json)
    as learning-curve rows of family ``DRAFT_LM``: its positions, its held-out top-1 agreement with the target
    (the zoo LMs' ``top1_agreement_with_target``: teacher-forced, as a drafter's step 1 is) and held-out
    perplexity. It drafts one token a forward, so it has no other draft steps (no mean over steps)."""
    rows = []
    for name, rung in rungs.items():
        if name not in metrics:
            raise DraftcountError(f"learning curves: no metrics for the draft LM {name!r}")
        found = metrics[name]
        if "top1_agreement_with_target" not in found:
            raise DraftcountError(f"learning curves: the draft LM {name!r} recorded no top1_agreement_with_target "
                                  f"(trained without a teacher?)")
        agreement = float(found["top1_agreement_with_target"])
        training = found.get("training") or {}
        rows.append({"family": DRAFT_LM, "drafter": name, "rung": rung, "tokens": training.get("tokens", np.nan),
                     "flops": training.get("flops", np.nan), "agreement_step1": agreement,
                     "agreement_by_step": json.dumps([agreement]),
                     "heldout_perplexity": found.get("heldout_perplexity", np.nan)})
    return pd.DataFrame(rows)


def shared_steps(curves: pd.DataFrame, at_most: int = MEAN_STEPS) -> int:
    """The draft steps the mean agreement averages: the first ``at_most``, or fewer when a family of ``curves``
    records fewer (eagle records 2, polybasic's mid LM 1), so that every family's mean covers the same steps (the
    draft LM's one step aside: it has no mean)."""
    drafters = curves[curves.family != DRAFT_LM] if "family" in curves else curves
    recorded = [len(json.loads(text)) for text in drafters.agreement_by_step]
    return min([at_most, *recorded])


def with_mean_agreement(curves: pd.DataFrame) -> pd.DataFrame:
    """``curves`` with ``agreement_mean`` (held-out agreement averaged over draft steps 1..n, n = ``shared_steps``
    for the whole table; none for the draft LM) and ``agreement_steps`` (n), from each row's
    ``agreement_by_step``."""
    steps = shared_steps(curves)
    families = curves.family if "family" in curves else pd.Series([""] * len(curves))
    means = [np.nan if family == DRAFT_LM else float(np.mean(json.loads(text)[:steps]))
             for family, text in zip(families, curves.agreement_by_step)]
    return curves.assign(agreement_mean=means, agreement_steps=steps)


def kendall_tau(first: list[float], second: list[float]) -> float:
    """Kendall's tau-b of two scorings of the same items (1: the same order, -1: reversed; ties count neither)."""
    concordant = discordant = ties_first = ties_second = 0
    for i, j in combinations(range(len(first)), 2):
        a, b = np.sign(first[i] - first[j]), np.sign(second[i] - second[j])
        if a == 0 and b == 0:
            continue
        if a == 0:
            ties_first += 1
        elif b == 0:
            ties_second += 1
        elif a == b:
            concordant += 1
        else:
            discordant += 1
    denominator = np.sqrt((concordant + discordant + ties_first) * (concordant + discordant + ties_second))
    return float((concordant - discordant) / denominator) if denominator else float("nan")


def ranking_stability(curves: pd.DataFrame, column: str = "agreement_step1") -> pd.DataFrame:
    """Kendall's tau between the drafter families' orders at each pair of adjacent rungs (families with a value at
    both). The draft LM is not ranked: its agreement is a zoo LM's measurement on other windows, and it runs no
    chain."""
    curves = curves[curves.family != DRAFT_LM]
    rungs = sorted(curves.rung.unique())
    rows = []
    for rung, following in zip(rungs, rungs[1:]):
        here = curves[curves.rung == rung].set_index("family")[column].dropna()
        there = curves[curves.rung == following].set_index("family")[column].dropna()
        shared = sorted(set(here.index) & set(there.index))
        rows.append({"rung": rung, "next_rung": following, "families": len(shared),
                     "kendall_tau": kendall_tau(list(here[shared]), list(there[shared])) if len(shared) > 1
                     else np.nan})
    return pd.DataFrame(rows, columns=STABILITY_COLUMNS)


def chain_columns(summary: pd.DataFrame, chains: dict[str, str]) -> pd.DataFrame:
    """One row per drafter of ``chains`` ({drafter: its chain run's bench variant}): per temperature T its chain's
    tau (``chain_tau_t<T>``) and paired speedup over `ar` with the 95% interval (``chain_speedup_t<T>``, ``_low``,
    ``_high``), from the summary of the chain runs' records."""
    return run_columns(summary, chains, "chain")


def calibrated_columns(summary: pd.DataFrame, runs: dict[str, str], dataset: str) -> pd.DataFrame:
    """One row per drafter of ``runs`` ({drafter: its run at its calibrated shape, on ``dataset``}): per temperature
    T the shape its calibration chose (``calibrated_shape_t<T>``, from the run's options), accepted drafts per step
    (``calibrated_accepted_t<T>``), tau and the paired speedup over `ar` with its interval (``calibrated_tau_t<T>``,
    ``calibrated_speedup_t<T>``, ``_low``, ``_high``)."""
    return run_columns(summary[summary.dataset == dataset], runs, "calibrated")


def run_columns(summary: pd.DataFrame, runs: dict[str, str], stem: str) -> pd.DataFrame:
    """Per drafter of ``runs`` ({drafter: bench variant}) and temperature: ``<stem>_tau_t<T>`` and
    ``<stem>_speedup_t<T>`` (``_low``, ``_high``); the calibrated runs also their shape and accepted drafts."""
    drafters = {variant: drafter for drafter, variant in runs.items()}
    missing = sorted(set(drafters) - set(summary.variant))
    if missing:
        raise DraftcountError(f"learning curves: no records of the {stem} run {missing[0]!r}")
    rows: dict[str, dict] = {}
    for row in summary[summary.variant.isin(drafters)].itertuples():
        at = f"t{row.temperature:g}"
        entry = rows.setdefault(drafters[row.variant], {"drafter": drafters[row.variant]})
        if stem == "calibrated":
            entry.update({f"{stem}_shape_{at}": shape_label(row.options, row.temperature),
                          f"{stem}_accepted_{at}": row.accepted_per_step})
        entry.update({f"{stem}_tau_{at}": row.tau, f"{stem}_speedup_{at}": row.speedup_paired_mean,
                      f"{stem}_speedup_{at}_low": row.speedup_ci_low, f"{stem}_speedup_{at}_high": row.speedup_ci_high})
    return pd.DataFrame(list(rows.values()))


SHAPE_FIELDS = ("depth", "budget", "gamma", "k", "verify_length", "block_size")  # what a calibration chooses


def shape_label(options: str, temperature: float = 1.0) -> str:
    """A run's calibrated shape in words from its summary ``options`` (JSON): ``depth 2, budget 4, sampled drafts``
    (the drafting convention only at T > 0, where it matters)."""
    found = json.loads(options) if isinstance(options, str) and options else {}
    parts = [f"{field} {found[field]}" for field in SHAPE_FIELDS if found.get(field) not in (None, "auto")]
    drafts = [f"{found['drafts']} drafts"] if found.get("drafts") and float(temperature) > 0 else []
    return ", ".join(parts + drafts) or "its own plan"


def per_temperature(columns, stem: str) -> dict[str, str]:
    """{T: column} of the columns named ``<stem>_t<T>`` (not their ``_low`` / ``_high``), by T."""
    found = {column.removeprefix(f"{stem}_t"): column for column in columns if column.startswith(f"{stem}_t")}
    return {at: found[at] for at in sorted(found) if "_" not in at}


def steps_label(curves: pd.DataFrame) -> str:
    """The draft steps the mean agreement of ``curves`` averages, in words (``steps 1-3``, ``step 1``)."""
    steps = int(curves.agreement_steps.iloc[0]) if len(curves) else MEAN_STEPS
    return "step 1" if steps == 1 else f"steps 1-{steps}"


def stability_table(curves: pd.DataFrame) -> pd.DataFrame:
    """Kendall's tau between adjacent rungs by step-1 agreement (``kendall_tau``) and, where the chains ran, by each
    temperature's chain tau (``kendall_tau_chain_tau_t<T>``)."""
    table = ranking_stability(curves)
    for column in per_temperature(curves.columns, "chain_tau").values():
        table[f"kendall_tau_{column}"] = ranking_stability(curves, column).kendall_tau.to_numpy()
    return table


def plot_learning_curves(curves: pd.DataFrame, stability: pd.DataFrame):
    """Against training positions (log x, labelled at each rung's positions), one line per family in its method's
    colour: each temperature's chain tau and paired speedup where the chains ran, held-out agreement (step 1, and the
    mean of the steps every family records, at most 1-3); then Kendall's tau between adjacent rungs (by agreement, and
    by each chain tau)."""
    from harness.analysis.plotting import MARKERS, figure_legend, log_ticks, palette, plt

    panels = [(column, f"{label}, T = {at}") for stem, label in CHAIN_FIGURES.items()
              for at, column in per_temperature(curves.columns, stem).items()]
    panels += [("agreement_step1", "held-out agreement, draft step 1")]
    if steps_label(curves) != "step 1":  # the shared steps are more than step 1
        panels += [("agreement_mean", f"held-out agreement, {steps_label(curves)} (mean)")]
    columns = 3
    rows = -(-(len(panels) + 1) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(11, 2.9 * rows + 0.4), squeeze=False, layout="constrained")
    axes = list(axes.flat)
    families = sorted(curves.family.unique())
    colours = palette(families)
    for axis, (column, title) in zip(axes, panels):
        for index, family in enumerate(families):
            found = curves[curves.family == family].sort_values("tokens")
            axis.plot(found.tokens, found[column], marker=MARKERS[index % len(MARKERS)], markersize=4,
                      color=colours[family], label=family)
        log_ticks(axis, curves.tokens)
        axis.set_xlabel("supervised target positions")
        axis.set_title(title)
    figure_legend(figure, axes[:1], title="drafter family")
    draw_stability(axes[len(panels)], stability)
    for axis in axes[len(panels) + 1:]:
        axis.set_visible(False)
    return figure


def draw_stability(bars, stability: pd.DataFrame) -> None:
    """Kendall's tau between adjacent rungs' orders of the families, one bar per ranking (agreement, chain tau)."""
    labels = [f"{row.rung:g}x -> {row.next_rung:g}x" for row in stability.itertuples()]
    scored = {"kendall_tau": "agreement", **{column: f"chain tau, T = {at}" for at, column in
                                             per_temperature(stability.columns, "kendall_tau_chain_tau").items()}}
    width = 0.8 / max(len(scored), 3)
    for index, (column, name) in enumerate(scored.items()):
        bars.bar(np.arange(len(labels)) + (index - (len(scored) - 1) / 2) * width, stability[column], width,
                 label=f"by {name}", color=("0.3", "#56b4e9", "#e69f00", "#009e73")[index % 4])
    bars.set_xticks(range(len(labels)), labels, rotation=30, ha="right", rotation_mode="anchor")
    bars.set_xlim(-0.8, max(len(labels), 2) - 0.2)
    bars.set_ylim(-1, 1)
    bars.axhline(0, color="0.3", linewidth=0.5)
    bars.legend(frameon=False, fontsize="x-small", loc="lower left")
    bars.set_title("ranking stability (Kendall's tau)")
    bars.set_xlabel("budget rungs (x the main budget)")


def parse_rungs(text: str, flag: str = "--rungs", value: str = "RUNG") -> dict[str, tuple[str, float]]:
    """``drafter=family:number,...`` -> {drafter: (family, number)}; one line on a bad entry."""
    rungs = {}
    for item in filter(None, text.split(",")):
        drafter, _, rest = item.partition("=")
        family, _, number = rest.partition(":")
        try:
            rungs[drafter.strip()] = (family.strip(), float(number))
        except ValueError:
            raise DraftcountError(f"{flag} wants DRAFTER=FAMILY:{value} entries, got {item!r}") from None
        if not drafter.strip() or not family.strip():
            raise DraftcountError(f"{flag} wants DRAFTER=FAMILY:{value} entries, got {item!r}")
    return rungs


def parse_draft_rungs(text: str) -> dict[str, float]:
    """``name=rung,...`` (the draft LM's models: ``draft=1,draft_lc05=0.5``) -> {name: rung}; one line on a bad
    entry."""
    rungs = {}
    for name, rung in parse_chains(text, "--draft-lm", "NAME=RUNG").items():
        try:
            rungs[name] = float(rung)
        except ValueError:
            raise DraftcountError(f"--draft-lm wants NAME=RUNG entries, got {name + '=' + rung!r}") from None
    return rungs


def read_metrics(paths: list[Path]) -> dict[str, dict]:
    """{drafter: its training metrics} from work/metrics/drafter-<name>.json files."""
    metrics = {}
    for path in paths:
        if not path.is_file():
            raise DraftcountError(f"no metrics file {path}")
        metrics[path.stem.removeprefix("drafter-")] = json.loads(path.read_text())
    return metrics


def parse_chains(text: str, flag: str = "--chains", entry: str = "DRAFTER=VARIANT") -> dict[str, str]:
    """``drafter=variant,...`` -> {drafter: its run's bench variant}; one line on a bad entry."""
    chains = {}
    for item in filter(None, text.split(",")):
        drafter, _, variant = item.partition("=")
        if not drafter.strip() or not variant.strip():
            raise DraftcountError(f"{flag} wants {entry} entries, got {item!r}")
        chains[drafter.strip()] = variant.strip()
    return chains


def redraw(table: Path, figure: Path | None) -> int:
    """Draw the figure again from a written table (and its ``<stem>_stability.csv`` beside it): no metrics needed."""
    stability_path = table.with_name(f"{table.stem}_stability.csv")
    for path in (table, stability_path):
        if not path.is_file():
            raise DraftcountError(f"learning-curves --table: no table {path}")
    if figure is None:
        raise DraftcountError("learning-curves --table redraws the figure: give --figure")
    from harness.analysis.plotting import STYLE, plt, save_figure

    figure.parent.mkdir(parents=True, exist_ok=True)
    curves = with_mean_agreement(pd.read_csv(table))  # a table written before the mean covered shared steps too
    with plt.rc_context(STYLE):
        for path in save_figure(plot_learning_curves(curves, pd.read_csv(stability_path)),
                                figure.parent, figure.name):
            print(f"wrote {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.table:
        return redraw(args.table, args.figure)
    if not (args.metrics and args.rungs and args.out):
        raise DraftcountError("learning-curves needs --metrics, --rungs and --out (or --table to redraw the figure)")
    metrics = read_metrics(args.metrics)
    curves = curve_rows(metrics, parse_rungs(args.rungs))
    if args.draft_lm:
        lm_rows = draft_lm_rows(metrics, parse_draft_rungs(args.draft_lm))
        curves = with_mean_agreement(pd.concat([curves.drop(columns=["agreement_mean", "agreement_steps"]), lm_rows],
                                               ignore_index=True)).sort_values(["family", "rung"], ignore_index=True)
    if bool(args.records) != bool(args.chains or args.calibrated):
        raise DraftcountError("learning-curves: --records goes with --chains or --calibrated (the runs and which "
                              "drafter each is)")
    if bool(args.calibrated) != bool(args.calibrated_dataset):
        raise DraftcountError("learning-curves: --calibrated and --calibrated-dataset go together")
    if args.records:
        summary = summarize(records_frame(args.records))
        if args.chains:
            curves = curves.merge(chain_columns(summary, parse_chains(args.chains)), on="drafter", how="left")
        if args.calibrated:
            curves = curves.merge(calibrated_columns(summary, parse_chains(args.calibrated, "--calibrated"),
                                                     args.calibrated_dataset), on="drafter", how="left")
    stability = stability_table(curves)
    fits = fit_table(curves)
    write_table(curves, args.out)
    write_table(stability, args.out.with_name(f"{args.out.stem}_stability.csv"))
    write_table(fits, args.out.with_name(f"{args.out.stem}_fit.csv"))
    print(curves.drop(columns="agreement_by_step").to_string(index=False))
    print(stability.to_string(index=False))
    print(fits.to_string(index=False))
    if args.figure:
        from harness.analysis.plotting import STYLE, plt, save_figure

        with plt.rc_context(STYLE):
            save_figure(plot_learning_curves(curves, stability), args.figure.parent, args.figure.name)
    return 0
