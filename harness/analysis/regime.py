"""The regime card at the top of the report: the figures that decide how far this run's rankings transfer to
another model and machine. The target's size and quality (parameters, held-out perplexity, greedy repetition rate
and looping share), how draftable its sampled text is (mean entropy, top-1 and top-10 probability mass of its own
T = 1 samples), and its cost structure (a 1-token forward over one drafter step, a verify forward at the trees
used over a 1-token forward), with one sentence on what differs from an 8B model on an H100 (the committed H100
latencies, when present). Torch-free: it reads the target's training metrics (or an imported target's, rule
evaluate_target: where it came from, its figures on its own answers to held-out chat questions) and the summary
table. Below it, per calibrated variant (its drafter's learning-curve rung, where it is one) and temperature: the
depth and budget (or chain length) rule tree_shape (chain_length) chose, the tokens a step that calibration
expected, and the tau the run measured (``calibrated_shapes``: the shape files the summary's options name)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from harness.analysis.sections import calibrated_section
from harness.analysis.tables import markdown_table
from harness.store.provenance import source_line

H100_LATENCIES = Path(__file__).resolve().parents[2] / "results" / "h100-2026-11-24" / "projection" / "latency.csv"


def target_metrics(metrics_paths: list[Path], role: str = "target") -> dict:
    """The training metrics of the zoo model ``role`` (target, draft: metrics/<role>.json) among ``metrics_paths``."""
    for path in metrics_paths:
        if Path(path).stem == role:
            return json.loads(Path(path).read_text())
    return {}


def cost_ratios(summary: pd.DataFrame) -> tuple[float, float, str, float]:
    """(the target's 1-token forward (`ar`) over the median drafter step of the drafting variants (draft LMs and
    trained drafters), the median verify forward over the 1-token forward, the range of tokens verified per step,
    the largest of them): medians over variants, datasets and temperatures."""
    ar = summary[summary.method == "ar"].target_seconds_per_forward.median()
    others = summary[summary.method != "ar"].dropna(subset=["target_seconds_per_forward"])
    drafters = others.drafter_seconds_per_forward.replace(0, float("nan")).dropna()
    forward_over_step = float(ar / drafters.median()) if len(drafters) else float("nan")
    verify_over_one = float((others.target_seconds_per_forward / ar).median()) if len(others) else float("nan")
    sizes = others.verified_per_step
    span = f"{sizes.min():.0f}-{sizes.max():.0f}" if len(sizes) else "-"
    return forward_over_step, verify_over_one, span, float(sizes.max()) if len(sizes) else float("nan")


def h100_reference(path: Path = H100_LATENCIES) -> tuple[float, float] | None:
    """(64-token verify / 1-token forward, 1-token forward / EAGLE step) of Llama-3.1-8B's shapes on the committed
    H100 run under CUDA graphs; None without that file."""
    if not path.is_file():
        return None
    table = pd.read_csv(path)
    graphs = table[table.timing == "cuda_graphs"].set_index(["component", "tokens"]).ms
    try:
        one, sixty_four = graphs[("target", 1)], graphs[("target", 64)]
        step = table[(table.timing == "cuda_graphs") & (table.component == "eagle_step")].ms.iloc[0]
    except (KeyError, IndexError):
        return None
    return float(sixty_four / one), float(one / step)


def transfer_sentence(forward_over_step: float, verify_over_one: float, span: str,
                      reference: tuple[float, float] | None) -> str:
    if reference is None:
        return ""
    verify_h100, steps_h100 = reference
    differs = []
    if verify_over_one > 1.5 * verify_h100:
        differs.append(f"verifying a tree here costs {verify_over_one:.2f}x a 1-token forward ({span} tokens), against "
                       f"{verify_h100:.2f}x for 64 tokens there, so large trees are penalised here that would pay there")
    if forward_over_step < 0.5 * steps_h100:
        differs.append(f"one target forward here costs {forward_over_step:.1f} drafter steps, against "
                       f"{steps_h100:.1f} there, so drafting is relatively dearer here")
    elif forward_over_step > 2 * steps_h100:
        differs.append(f"one target forward here costs {forward_over_step:.1f} drafter steps, against "
                       f"{steps_h100:.1f} there, so drafting is relatively cheaper here")
    reference_text = (f"On an 8B target on an H100 (`results/h100-2026-11-24`, CUDA graphs) a 64-token verify costs "
                      f"{verify_h100:.2f}x a 1-token forward and one forward {steps_h100:.1f} EAGLE steps. ")
    if not differs:
        return reference_text + "The cost ratios here are within a factor of about 2 of those."
    return reference_text + "What differs: " + "; ".join(differs) + "."


def _number(value: object, fmt: str) -> str:
    if not isinstance(value, (int, float)) or value != value:  # missing or NaN
        return "-"
    return fmt.format(value)


SHAPE_COLUMNS = ["variant", "drafter", "rung", "temperature", "calibrated_shape", "calibrated_accepted_per_step",
                 "tau"]


def drafter_rung(drafter: str) -> str:
    """A drafter's learning-curve rung from its name (``eagle_lc025`` -> ``0.25x``; study drafter_studies.smk's
    names, which drop the point: a rung of 1.5 would read 15x), ``1x`` (the main budget) for any other."""
    found = re.search(r"_lc(\d+)$", drafter)
    if not found:
        return "1x"
    digits = found.group(1)
    value = float(digits) if not digits.startswith("0") else float(f"0.{digits[1:]}")
    return f"{value:g}x"


def read_shape(options: dict) -> tuple[str, float] | None:
    """(the shape in words, the calibration's accepted tokens a step) from the shape or length file a bench row's
    options name; None when they name neither or it cannot be read."""
    path = options.get("shape_file") or options.get("length_file")
    try:
        chosen = json.loads(Path(str(path)).read_text()) if path else None
    except (OSError, ValueError):
        return None
    if not isinstance(chosen, dict):
        return None
    if "depth" in chosen:
        words = f"depth {chosen['depth']}, budget {chosen.get('budget', '-')}"
    elif "length" in chosen:
        words = f"{chosen.get('field', 'length')} {chosen['length']}"
    else:
        return None
    return words, float(chosen.get("accepted_per_step", float("nan")))


def calibrated_shapes(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per calibrated variant and temperature of ``summary``: its drafter and rung, the calibrated shape,
    the accepted tokens a step the calibration expected, and the run's tau (its datasets' turns-weighted mean)."""
    rows = []
    if summary.empty or "options" not in summary:
        return pd.DataFrame(columns=SHAPE_COLUMNS)
    for (variant, temperature), group in summary.groupby(["variant", "temperature"], sort=True):
        options = json.loads(group.options.iloc[0]) if isinstance(group.options.iloc[0], str) else {}
        shape = read_shape(options)
        if shape is None:
            continue
        weights = group.turns if "turns" in group else pd.Series(1.0, index=group.index)
        tau = float((group.tau * weights).sum() / weights.sum()) if weights.sum() else float("nan")
        drafter = str(options.get("drafter") or "-")
        rows.append({"variant": variant, "drafter": drafter, "rung": drafter_rung(drafter),
                     "temperature": float(temperature), "calibrated_shape": shape[0], "calibrated_accepted_per_step": shape[1],
                     "tau": tau})
    return pd.DataFrame(rows, columns=SHAPE_COLUMNS)


def shapes_table(shapes: pd.DataFrame) -> str:
    """The calibrated shapes as a markdown table ("" without any)."""
    if shapes.empty:
        return ""
    rows = [[row.variant, row.drafter, row.rung, f"{row.temperature:g}", row.calibrated_shape,
             _number(row.calibrated_accepted_per_step, "{:.2f}"), _number(row.tau, "{:.2f}")]
            for row in shapes.itertuples()]
    return markdown_table(["variant", "drafter", "rung", "T", "calibrated shape", "accepted a step (calibration)",
                           "tau (run)"], rows)


def regime_card(metrics_paths: list[Path], summary: pd.DataFrame, curves: pd.DataFrame | None = None) -> str:
    """The card as a markdown table and a sentence; empty when there is neither a target metrics file nor timing.
    With the learning curves' table (``curves``, rule learning_curves'), each rung that ran at its own calibrated
    shape is listed below the main runs' shapes: the regime each training budget reaches."""
    target = target_metrics(metrics_paths)
    degeneracy, sampling = target.get("degeneracy") or {}, target.get("sampling") or {}
    forward_over_step, verify_over_one, span, _ = cost_ratios(summary)
    machine = target.get("trained_on") or {}
    origin = (["target imported", source_line(target["imported"])] if target.get("imported") else
              ["target trained on", ", ".join(machine["gpus"]) or machine["cpu"] if machine else "-"])
    rows = [
        ["target parameters", _number(target.get("parameters"), "{:,}")],
        origin,
        ["held-out perplexity", _number(target.get("heldout_perplexity"), "{:.1f}")],
        ["greedy repetition rate (4-grams)", _number(degeneracy.get("repetition_rate"), "{:.2f}")],
        ["looping share (greedy continuations)", _number(degeneracy.get("looping_share"), "{:.2f}")],
        ["entropy of its T = 1 samples (nats)", _number(sampling.get("entropy_nats"), "{:.2f}")],
        ["top-1 / top-10 probability mass at T = 1",
         f"{_number(sampling.get('top1_mass'), '{:.2f}')} / {_number(sampling.get('top10_mass'), '{:.2f}')}"],
        ["1-token forward / drafter step (median)", _number(forward_over_step, "{:.1f}")],
        [f"verify forward / 1-token forward (median, {span} tokens)", _number(verify_over_one, "{:.2f}")],
    ]
    if target.get("evaluated_on"):  # an imported target: its figures come from its answers, not a held-out corpus
        rows.insert(2, ["repetition and sampling measured on", target["evaluated_on"]])
    if not target and all(row[1] == "-" for row in rows[-2:]):  # no metrics file and no timing either
        return ""
    sentence = transfer_sentence(forward_over_step, verify_over_one, span, h100_reference())
    shapes = shapes_table(calibrated_shapes(summary))
    rungs = calibrated_section(curves) if curves is not None else ""
    return (markdown_table(["regime", "value"], rows) + ("\n\n" + sentence if sentence else "")
            + ("\n\nThe calibrated shapes (rules tree_shape and chain_length), per drafter's rung and temperature:\n\n"
               + shapes if shapes else "")
            + ("\n\nThe learning curves' rungs, each drafter at the shape calibrated for it on one prompt set "
               "(`studies/tables/learning_curves.csv`; 1x: the main budget): the shape, accepted drafts a step, tau "
               "and the paired speedup the run measured:\n\n" + rungs if rungs else ""))
