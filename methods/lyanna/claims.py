"""The paper's claims, judged (the report's section "The paper's claims"): one row per claim of arXiv 2602.21224's
abstract, with our figure from the same runs as every other table, its 95% interval (a percentile bootstrap over
prompts, ``harness.analysis.timing.cluster_bootstrap``) and a verdict in one word. Torch-free, as every view.

The claims and how each is measured (T = each temperature of the run, the prompt sets pooled; a variant is a
method's main variant, named after it, unless said otherwise):

- ``waste``: "most drafts fail verification and are wasted": the share of drafted tokens that verification
  rejects, for the token-conditioned drafters the paper argues against (``sd``'s draft LM, ``eagle``'s head).
  Reproduced when the whole interval lies above one half.
- ``reuse``: "hidden-state drafts stay uncontaminated, so they can be reused; resampling from verification failures
  recovers them": lyanna's drafter-FLOP waste against eagle's (the difference, eagle minus lyanna: above 0 when
  lyanna wastes less of its drafter's work), and lyanna against its own ``reuse=off`` variant (the paired speedup
  ratio: above 1 when reuse pays).
- ``injection``: "the token-information injection builds high-quality draft trees": tau of lyanna's token-info
  drafter over tau of the feature-injection drafter (``inject=feature``), at the same tree shape.
- ``overhead``: "the design's hidden overhead is removed": lyanna with verification fusion against without
  (``verify_fusion=off``), the paired speedup ratio.
- ``sd``: "up to 3.3x over standard speculative decoding": lyanna's paired speedup over sd's, per prompt set (the
  best set's row is the "up to"). Reproduced when the best set's interval reaches 3.3 and lies above 1; partly when
  it lies above 1 but below 3.3.
- ``eagle`` (ours, not the paper's claim): lyanna against EAGLE, the paired speedup ratio and the tau ratio. Equal
  drafter parameters and training positions are the configs' (``match_eagle``, one ``budget_tokens``), not checked
  here: the models table shows both.

An ablation is compared with the lyanna variant of the same tree shape (top_k, depth, budget) and the default
switches (reuse=logits, verify_fusion=on, inject=token_info, the main variant's drafter), when the run has one; else
with the main variant, and the row says the shapes differ. A claim whose variants did not run reads "not measured".
Verdicts: reproduced (the interval on the paper's side of the threshold), partly, not at this scale (the interval
holds the threshold), contradicted (the interval on the other side), not measured; our own rows say which drafter is
ahead (lyanna ahead, eagle ahead, no difference).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd

from harness.analysis.regime import cost_ratios, target_metrics
from harness.analysis.summary import paired_with_ar
from harness.analysis.timing import cluster_bootstrap, geometric_mean, paired_ratios, prompt_bootstrap_interval

METHOD = "lyanna"
PAPER_SPEEDUP_OVER_SD = 3.3
DEFAULT_SWITCHES = {"reuse": "logits", "verify_fusion": "on", "inject": "token_info", "overlap": "off"}
ABLATIONS = (("reuse", "reuse", "off"), ("injection", "inject", "feature"), ("overhead", "verify_fusion", "off"))
COLUMNS = ["claim", "measure", "variant", "against", "dataset", "temperature", "turns", "value", "ci_low", "ci_high",
           "threshold", "verdict", "note"]
TURN_KEY = ["dataset", "pair_id", "sample", "repeat"]


def claims_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Every claim's rows at every temperature of the run (``COLUMNS``); empty without a lyanna main variant."""
    methods = frame[frame.role == "method"] if "role" in frame else frame
    if METHOD not in set(methods.get("variant", ())):
        return pd.DataFrame(columns=COLUMNS)
    baseline = frame[frame.role == "baseline"].set_index(["run", "pair_id"])
    rows: list[dict] = []
    for temperature in sorted(methods.temperature.unique()):
        turns = methods[methods.temperature == temperature]
        rows += waste_rows(turns) + reuse_rows(turns) + ablation_rows(turns, baseline)
        rows += sd_rows(turns, baseline) + eagle_rows(turns, baseline)
    variants = lyanna_variants(methods)
    for claim, switch, value in ABLATIONS:  # a claim no variant of the run can judge: said once
        if not any(details.get(switch) == value for _, details in variants.values()):
            rows.append(row(claim, f"needs a lyanna variant with {switch}={value}", METHOD, "", 0, np.nan,
                            (np.nan, np.nan), 1.0, note="not in this run"))
    if "sd" not in set(methods.variant):
        rows.append(row("sd", "paired speedup, lyanna over sd", METHOD, "sd", 0, np.nan, (np.nan, np.nan), 1.0,
                        PAPER_SPEEDUP_OVER_SD, "sd did not run"))
    return pd.DataFrame(rows, columns=COLUMNS)


def verdict(low: float, high: float, threshold: float, reach: float | None = None) -> str:
    """The one-word verdict of an interval against the paper's side of ``threshold`` (above it); with ``reach``,
    an interval above the threshold that stops short of ``reach`` is only partly the paper's figure."""
    if not np.isfinite(low) or not np.isfinite(high):
        return "not measured"
    if low > threshold:
        return "reproduced" if reach is None or high >= reach else "partly"
    return "contradicted" if high < threshold else "not at this scale"


def row(claim: str, measure: str, variant: str, against: str, turns: pd.DataFrame | int, value: float,
        interval: tuple[float, float], threshold: float, reach: float | None = None, note: str = "",
        dataset: str = "all") -> dict:
    count = turns if isinstance(turns, int) else len(turns)
    temperature = float(turns.temperature.iloc[0]) if not isinstance(turns, int) and count else np.nan
    judged = verdict(*interval, threshold, reach)
    if claim == "eagle":  # ours: which drafter is ahead, not a verdict on the paper
        judged = {"reproduced": "lyanna ahead", "contradicted": "eagle ahead",
                  "not at this scale": "no difference"}.get(judged, judged)
    return {"claim": claim, "measure": measure, "variant": variant, "against": against, "dataset": dataset,
            "temperature": temperature, "turns": count, "value": value, "ci_low": interval[0], "ci_high": interval[1],
            "threshold": threshold, "verdict": judged, "note": note}


def clusters(turns: pd.DataFrame) -> np.ndarray:
    """A turn's prompt, across prompt sets: the bootstrap's unit."""
    return (turns.dataset.astype(str) + "/" + turns.prompt_id.astype(str)).to_numpy()


def share_interval(numerator: np.ndarray, denominator: np.ndarray, keys: np.ndarray) -> tuple[float, float]:
    return cluster_bootstrap({"num": numerator, "den": denominator}, keys, lambda sums: sums["num"] / sums["den"])


def waste_rows(turns: pd.DataFrame) -> list[dict]:
    rows = []
    for variant in ("sd", "eagle"):
        mine = turns[turns.variant == variant]
        if mine.empty or not mine.drafted_tokens.sum():
            continue
        rejected = (mine.drafted_tokens - mine.accepted_tokens).to_numpy(float)
        value = rejected.sum() / mine.drafted_tokens.sum()
        rows.append(row("waste", "share of drafted tokens rejected", variant, "", mine, value,
                        share_interval(rejected, mine.drafted_tokens.to_numpy(float), clusters(mine)), 0.5))
    return rows


def two_share_statistic(mine: pd.DataFrame, theirs: pd.DataFrame, numerator: str, denominator: str,
                        combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> tuple[float, tuple[float, float]]:
    """``combine(mine's share, theirs')`` of two variants' ratios of sums (sum of ``numerator`` over sum of
    ``denominator``), and its interval: both variants' turns resampled together, prompt by prompt."""
    both = pd.concat([mine, theirs])
    side = np.r_[np.ones(len(mine)), np.zeros(len(theirs))]
    top, bottom = both[numerator].to_numpy(float), both[denominator].to_numpy(float)
    columns = {"top_m": top * side, "bottom_m": bottom * side,
               "top_o": top * (1 - side), "bottom_o": bottom * (1 - side)}

    def statistic(sums: dict[str, np.ndarray]) -> np.ndarray:
        return combine(sums["top_m"] / sums["bottom_m"], sums["top_o"] / sums["bottom_o"])

    value = float(statistic({name: np.array([values.sum()]) for name, values in columns.items()})[0])
    return value, cluster_bootstrap(columns, clusters(both), statistic)


def reuse_rows(turns: pd.DataFrame) -> list[dict]:
    """Drafter-FLOP waste, eagle minus lyanna (both prompt sets' turns resampled together)."""
    mine, theirs = turns[turns.variant == METHOD], turns[turns.variant == "eagle"]
    if theirs.empty or not mine.drafter_flops.sum() or not theirs.drafter_flops.sum():
        return []
    mine, theirs = (rows.assign(drafter_wasted_flops=rows.drafter_flops - rows.drafter_useful_flops)
                    for rows in (mine, theirs))
    value, interval = two_share_statistic(mine, theirs, "drafter_wasted_flops", "drafter_flops",
                                          lambda lyanna, eagle: eagle - lyanna)
    return [row("reuse", "drafter-FLOP waste, eagle minus lyanna", METHOD, "eagle", mine, value, interval, 0.0)]


def ablation_rows(turns: pd.DataFrame, baseline: pd.DataFrame) -> list[dict]:
    """Each lyanna ablation (reuse off, feature injection, no verification fusion) against its reference."""
    rows = []
    variants = lyanna_variants(turns)
    for claim, switch, value in ABLATIONS:
        for ablation, (options, details) in variants.items():
            if details.get(switch) != value:
                continue
            reference, note = reference_of(ablation, variants)
            if claim == "injection":  # the two drafters' training budgets may differ: the models table says
                rows.append(tau_ratio_row(claim, "tau, token-info over feature injection", turns, reference, ablation,
                                          "; ".join(filter(None, [note, "drafters trained apart: their budgets are "
                                                                        "in the models table"]))))
            else:
                measure = {"reuse": "paired speedup, reuse=logits over reuse=off",
                           "overhead": "paired speedup, verification fusion on over off"}[claim]
                rows.append(speedup_ratio_row(claim, measure, turns, baseline, reference, ablation, 1.0, note=note))
    return rows


def lyanna_variants(turns: pd.DataFrame) -> dict[str, tuple[dict, dict]]:
    """{lyanna variant: (its options, its method details)} as the records have them."""
    first = turns[turns.method == METHOD].groupby("variant").first()
    return {variant: (json.loads(item.options), json.loads(item.details) if "details" in item else {})
            for variant, item in first.iterrows()}


def reference_of(ablation: str, variants: dict[str, tuple[dict, dict]]) -> tuple[str, str]:
    """The same-shape lyanna variant with the default switches and the main drafter, else the main variant."""
    options, _ = variants[ablation]
    shape = {key: options.get(key) for key in ("top_k", "depth", "budget")}
    main_drafter = variants.get(METHOD, ({}, {}))[0].get("drafter")
    for name, (other, details) in variants.items():
        if (name != ablation and all(other.get(key) == value for key, value in shape.items())
                and all(details.get(key, value) == value for key, value in DEFAULT_SWITCHES.items())
                and other.get("drafter") == main_drafter):
            return name, ""
    main = variants.get(METHOD, ({}, {}))[0]
    return METHOD, (f"shapes differ: {METHOD} ran depth {main.get('depth')}, budget {main.get('budget')}; "
                    f"{ablation} depth {options.get('depth')}, budget {options.get('budget')}")


def turn_speedups(turns: pd.DataFrame, baseline: pd.DataFrame, variant: str) -> pd.DataFrame:
    """A variant's turns with their paired speedup over `ar` (``speedup``), indexed by ``TURN_KEY``."""
    paired = paired_with_ar(turns[turns.variant == variant], baseline)
    return paired.assign(speedup=paired_ratios(paired)).set_index(TURN_KEY)


def speedup_ratio_row(claim: str, measure: str, turns: pd.DataFrame, baseline: pd.DataFrame, variant: str,
                      against: str, threshold: float, reach: float | None = None, note: str = "",
                      dataset: str = "all") -> dict:
    """The geometric mean over shared turns of variant's paired speedup over against's, with its interval."""
    mine, theirs = turn_speedups(turns, baseline, variant), turn_speedups(turns, baseline, against)
    shared = mine.join(theirs[["speedup"]], rsuffix="_against", how="inner").reset_index()
    if shared.empty:
        return row(claim, measure, variant, against, 0, np.nan, (np.nan, np.nan), threshold, reach,
                   note or "no shared turns", dataset)
    ratios = (shared.speedup / shared.speedup_against).to_numpy(float)
    return row(claim, measure, variant, against, shared, geometric_mean(ratios),
               prompt_bootstrap_interval(ratios, clusters(shared)), threshold, reach, note, dataset)


def tau_ratio_row(claim: str, measure: str, turns: pd.DataFrame, variant: str, against: str, note: str) -> dict:
    """Tau of ``variant`` over tau of ``against`` on the turns both ran (the same prompts of the same sets)."""
    mine, theirs = turns[turns.variant == variant], turns[turns.variant == against]
    mine, theirs = mine.merge(theirs[TURN_KEY], on=TURN_KEY), theirs.merge(mine[TURN_KEY], on=TURN_KEY)
    if mine.empty:
        return row(claim, measure, variant, against, 0, np.nan, (np.nan, np.nan), 1.0, note=note or "no shared turns")
    value, interval = two_share_statistic(mine, theirs, "accept_length_sum", "verify_steps", np.divide)
    return row(claim, measure, variant, against, mine, value, interval, 1.0, note=note)


def sd_rows(turns: pd.DataFrame, baseline: pd.DataFrame) -> list[dict]:
    """Lyanna over sd per prompt set, the best set first (the paper's "up to"), then pooled."""
    if turns[turns.variant == "sd"].empty:
        return []
    measure = "paired speedup, lyanna over sd"
    per_set = [speedup_ratio_row("sd", measure, turns[turns.dataset == dataset], baseline, METHOD, "sd", 1.0,
                                 PAPER_SPEEDUP_OVER_SD, dataset=dataset) for dataset in sorted(turns.dataset.unique())]
    per_set.sort(key=lambda item: -item["value"] if np.isfinite(item["value"]) else np.inf)
    if per_set:
        per_set[0]["note"] = "the best prompt set (the paper's 'up to')"
    return per_set + [speedup_ratio_row("sd", measure, turns, baseline, METHOD, "sd", 1.0, PAPER_SPEEDUP_OVER_SD)]


def eagle_rows(turns: pd.DataFrame, baseline: pd.DataFrame) -> list[dict]:
    if turns[turns.variant == "eagle"].empty:
        return []
    return [speedup_ratio_row("eagle", "paired speedup, lyanna over eagle", turns, baseline, METHOD, "eagle", 1.0),
            tau_ratio_row("eagle", "tau, lyanna over eagle", turns, METHOD, "eagle", "")]


CLAIM_TEXT: dict[str, str] = {
    "waste": "Most drafts fail verification and are wasted",
    "reuse": "Hidden-state drafts stay uncontaminated and are reused; resampling from failures recovers them",
    "injection": "The token-information injection builds high-quality draft trees",
    "overhead": "The design's hidden overhead is removed (verification fusion)",
    "sd": "Up to 3.3x over standard speculative decoding",
    "eagle": "Ours, not the paper's: Lyanna against EAGLE (equal parameters and positions: the models table)",
}


def claims_section(table: pd.DataFrame, caveat: Callable[[], str] = lambda: "") -> str:
    """The report's section: one line per measured row, the claims in the abstract's order, ours last."""
    if table.empty:
        return ""
    lines = ["| claim | measure | T | prompt set | turns | ours | 95% interval | verdict | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for claim, text in CLAIM_TEXT.items():
        for item in table[table.claim == claim].itertuples():
            value = "-" if not np.isfinite(item.value) else f"{item.value:.3g}"
            interval = "-" if not np.isfinite(item.ci_low) else f"[{item.ci_low:.3g}, {item.ci_high:.3g}]"
            against = f" ({item.variant} vs {item.against})" if isinstance(item.against, str) and item.against \
                else f" ({item.variant})"
            temperature = "-" if not np.isfinite(item.temperature) else f"{item.temperature:g}"
            note = item.note if isinstance(item.note, str) else ""
            lines.append(f"| {text} | {item.measure}{against} | {temperature} | {item.dataset} | {item.turns} | "
                         f"{value} | {interval} | **{item.verdict}** | {note} |")
    text = caveat()
    return "\n".join(lines) + (f"\n\n{text}" if text else "")


def regime_caveat(metrics_paths: list, summary: pd.DataFrame) -> str:
    """One sentence from the regime card: what this target is, beside the paper's 7B-and-up targets on GPUs."""
    target = target_metrics(metrics_paths)
    forward_over_step, verify_over_one, span, _ = cost_ratios(summary)
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
            "drafter step is a far smaller share of a target forward: a verdict here is about this regime.")
