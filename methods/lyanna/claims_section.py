"""The report's section *The paper's claims*: the claims table (``methods.lyanna.claims``) as markdown, one line per
row in the abstract's order, ours last, and the sentences that stand beside it (the regime, the draft LM of sd).
Torch-free, as every view."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from harness.analysis.regime import calibrated_shapes, cost_ratios, target_metrics

HEADER = ("| claim | measure | regime | T | prompt set | turns | ours | 95% interval | exercised | leave one prompt out | "
          "seeds | verdict | note |")


CLAIM_TEXT: dict[str, str] = {
    "waste": "Most drafts fail verification and are wasted",
    "reuse": "Hidden-state drafts stay uncontaminated and are reused; resampling from failures recovers them",
    "injection": "The token-information injection builds high-quality draft trees",
    "overhead": "The design's hidden overhead is removed (verification fusion)",
    "sd": "Up to 3.3x over standard speculative decoding",
    "eagle": "Ours, not the paper's: Lyanna against EAGLE (equal training positions; parameters: the note)",
}


def claims_section(table: pd.DataFrame, caveat: Callable[[], str] = lambda: "") -> str:
    """The report's section: one line per measured row, the claims in the abstract's order, ours last."""
    if table.empty:
        return ""
    lines = [HEADER, "|---" * HEADER.count(" | ") + "|---|"]
    for claim, text in CLAIM_TEXT.items():
        for item in table[table.claim == claim].itertuples():
            value = "-" if not np.isfinite(item.value) else f"{item.value:.3g}"
            interval = "-" if not np.isfinite(item.ci_low) else f"[{item.ci_low:.3g}, {item.ci_high:.3g}]"
            against = f" ({item.variant} vs {item.against})" if isinstance(item.against, str) and item.against \
                else f" ({item.variant})"
            temperature = "-" if not np.isfinite(item.temperature) else f"{item.temperature:g}"
            note, exercised, loo, seeds, regime = (cell if isinstance(cell, str) else "" for cell in (
                item.note, item.exercised, item.leave_one_out, item.seeds, item.regime))
            lines.append(f"| {text} | {item.measure}{against} | {regime} | {temperature} | {item.dataset} | "
                         f"{item.turns} | {value} | {interval} | {exercised} | {loo} | {seeds} | **{item.verdict}** | "
                         f"{note} |")
    text = caveat()
    return "\n".join(lines) + (f"\n\n{text}" if text else "")


def draft_lm_sentence(metrics_paths: list) -> str:
    """What stands beside the verdict over standard SD: the draft LM of sd and tree_sd, its held-out perplexity,
    its top-1 agreement with the target and the positions it trained on (metrics/draft.json); "" without one."""
    draft = target_metrics(metrics_paths, "draft")
    if "heldout_perplexity" not in draft:
        return ""
    agreement = draft.get("top1_agreement_with_target")
    positions = (draft.get("training") or {}).get("tokens")
    return ("The draft LM of sd and tree_sd: held-out perplexity " + f"{draft['heldout_perplexity']:.1f}"
            + (f", top-1 agreement with the target {agreement:.3f}" if agreement is not None else "")
            + (f", trained on {positions:,} positions" if positions else "") + ".")


def regime_caveat(metrics_paths: list, summary: pd.DataFrame) -> str:
    """One sentence from the regime card: what this target is, beside the paper's 7B-and-up targets on GPUs."""
    target = target_metrics(metrics_paths)
    forward_over_step, *_ = cost_ratios(summary)
    parts = []
    if target.get("parameters"):
        origin = "imported" if target.get("imported") else "trained here"
        parts.append(f"a {target['parameters'] / 1e6:.0f}M-parameter target ({origin})")
    repetition = (target.get("degeneracy") or {}).get("repetition_rate")
    if repetition is not None:
        parts.append(f"greedy 4-gram repetition {repetition:.2f}")
    entropy = (target.get("sampling") or {}).get("entropy_nats")
    if entropy is not None:
        parts.append(f"T = 1 entropy {entropy:.2f} nats")
    if np.isfinite(forward_over_step):
        parts.append(f"a 1-token forward costs {forward_over_step:.1f} drafter steps")
    if not parts:
        return ""
    return ("Regime (the card above): " + ", ".join(parts) + ". The paper measures 7B-and-up targets on GPUs, where a "
            "drafter step is a far smaller share of a target forward: a verdict here is about this regime."
            + shapes_sentence(summary))


def shapes_sentence(summary: pd.DataFrame, methods: tuple[str, ...] = ("lyanna", "eagle")) -> str:
    """The calibrated shape of the paper's pair's variants (and their seeds') per rung and temperature, with the
    accepted tokens a step the calibration expected and the run's tau ("" where none was calibrated)."""
    shapes = calibrated_shapes(summary)
    shapes = shapes[shapes.variant.str.split("_").str[0].isin(methods)]
    if shapes.empty:
        return ""
    items = [f"{row.variant} ({row.rung}) at T = {row.temperature:g}: {row.calibrated_shape}, "
             f"{row.calibrated_accepted_per_step:.2f} accepted a step calibrated, tau {row.tau:.2f}"
             for row in shapes.itertuples()]
    return " Calibrated shapes: " + "; ".join(items) + "."
