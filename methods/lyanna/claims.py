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
- ``sd``: "up to 3.3x over standard speculative decoding": lyanna's paired speedup over the better of calibrated sd
  and calibrated tree_sd at that temperature (``better_standard_sd``; the other one's row stands beside, and the
  draft LM's perplexity and agreement with the target below the table), per prompt set (the best set's row is the
  "up to"). Reproduced when the best set's interval reaches 3.3 and lies above 1; partly when it lies above 1 but
  below 3.3.
- ``eagle`` (ours, not the paper's claim): lyanna against EAGLE, the paired speedup ratio and the tau ratio, the two
  drafters trained on equal positions (the configs' budgets). The note says "equal parameters" only where the two
  drafters' parameter counts in the records differ by at most 2% (``methods.lyanna.parity``), else "parameters
  differ", with both counts; the models table shows them by component.

An ablation is compared with the lyanna variant of the same tree shape (top_k, depth, budget) and the default
switches (reuse=logits, verify_fusion=on, inject=token_info, the main variant's drafter), when the run has one; else
with the main variant, and the row says the shapes differ. A claim whose variants did not run reads "not measured".
Verdicts: reproduced (the interval on the paper's side of the threshold), partly, not at this scale (the interval
holds the threshold), contradicted (the interval on the other side), not measured; our own rows say which drafter is
ahead (lyanna ahead, eagle ahead, no difference).

Before a verdict stands (``methods.lyanna.claims_checks``; column ``exercised``, ``leave_one_out``, ``seeds``):

- Exercised. A reuse or tree-building claim (``reuse``, ``injection``) needs every variant of its row to draft
  deeper than one step (the depth in the records' options: a calibrated shape's); the fusion ablation (``overhead``)
  needs tau without fusion within 2% of tau with it. Where the run does not meet it the row keeps its figure and
  reads **not exercised here**. ``waste``, ``sd`` and ``eagle`` are end to end: always exercised.
- Deep shape (column ``regime``). Where the run has ``lyanna_deep`` and ``eagle_deep`` (study ``claims``: both at
  top_k 4, depth 5, budget 24, lyanna's default switches), the reuse and ``eagle`` rows are measured again between
  them, marked ``deep shape``; the other rows' regime is ``calibrated`` (each variant's own shape).
- Leave one prompt out. Each row's statistic and interval again without each prompt in turn (the same bootstrap);
  a verdict that any one prompt's removal changes reads **fragile**.
- Seeds. Where the run has ``<variant>_seed<s>`` variants (the seeds study: the same recipe, another seed), every row
  reading ``<variant>`` is measured again with the seed's model in its place; the verdict stands only where every
  seed gives it, otherwise the row reads **not decided** (column ``seeds``: each seed's verdict and figure).
  Where it has ``<variant>_target<t>`` variants (config ``target_seeds``: the zoo's target, draft LM and drafters
  retrained with other seeds), every row whose variants all ran there is measured again on that target ("target
  seed t"), under the same rule; the ``sd`` rows against the better of sd and tree_sd are matched by that rule, each
  target choosing its better.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd

from harness.analysis.summary import paired_with_ar
from harness.analysis.timing import paired_ratios
from methods.lyanna.claims_checks import (
    NOT_EXERCISED,
    Measured,
    combine_seeds,
    depth_exercised,
    is_exercised,
    leave_one_out_check,
    seed_frames,
    tau_exercised,
)
from methods.lyanna.parity import parameter_note

METHOD = "lyanna"
PAPER_SPEEDUP_OVER_SD = 3.3
DEFAULT_SWITCHES = {"reuse": "logits", "verify_fusion": "on", "inject": "token_info", "overlap": "off"}
ABLATIONS = (("reuse", "reuse", "off"), ("injection", "inject", "feature"), ("overhead", "verify_fusion", "off"))
COLUMNS = ["claim", "measure", "variant", "against", "regime", "dataset", "temperature", "turns", "value", "ci_low",
           "ci_high", "threshold", "exercised", "leave_one_out", "seeds", "verdict", "note"]
TURN_KEY = ["dataset", "pair_id", "sample", "repeat"]
CALIBRATED = "calibrated"
DEEP_SHAPE = {"top_k": 4, "depth": 5, "budget": 24}
DEEP = "deep shape (top_k 4, depth 5, budget 24)"
DEEP_VARIANTS = {METHOD: "lyanna_deep", "eagle": "eagle_deep"}  # study `claims` in the configs
END_TO_END = "yes: end to end"
TRAINED_APART = "drafters trained apart: their budgets are in the models table"


def claims_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Every claim's rows at every temperature of the run (``COLUMNS``), each seed's verdicts combined; empty
    without a lyanna main variant."""
    methods = frame[frame.role == "method"] if "role" in frame else frame
    if METHOD not in set(methods.get("variant", ())):
        return pd.DataFrame(columns=COLUMNS)
    frames = seed_frames(frame)
    per_seed = {label: seed_rows(seed_frame.frame) for label, seed_frame in frames.items()}
    return pd.DataFrame(combine_seeds(per_seed, frames), columns=COLUMNS)


def seed_rows(frame: pd.DataFrame) -> list[dict]:
    """The rows of one seed's frame (``claims_checks.seed_frames``), each with its own verdict."""
    methods = frame[frame.role == "method"]
    baseline = frame[frame.role == "baseline"].set_index(["run", "pair_id"])
    rows: list[dict] = []
    for temperature in sorted(methods.temperature.unique()):
        turns = methods[methods.temperature == temperature]
        rows += waste_rows(turns) + reuse_rows(turns) + ablation_rows(turns, baseline)
        rows += sd_rows(turns, baseline) + eagle_rows(turns, baseline) + deep_rows(turns, baseline)
    variants = lyanna_variants(methods)
    for claim, switch, value in ABLATIONS:  # a claim no variant of the run can judge: said once
        if not any(details.get(switch) == value for _, details in variants.values()):
            rows.append(row(claim, f"needs a lyanna variant with {switch}={value}", METHOD, "", 0, None, 1.0,
                            note="not in this run"))
    if not set(STANDARD_SD) & set(methods.variant):
        rows.append(row("sd", "paired speedup, lyanna over sd", METHOD, "sd", 0, None, 1.0, PAPER_SPEEDUP_OVER_SD,
                        "neither sd nor tree_sd ran"))
    return rows


def verdict(low: float, high: float, threshold: float, reach: float | None = None) -> str:
    """The one-word verdict of an interval against the paper's side of ``threshold`` (above it); with ``reach``,
    an interval above the threshold that stops short of ``reach`` is only partly the paper's figure."""
    if not np.isfinite(low) or not np.isfinite(high):
        return "not measured"
    if low > threshold:
        return "reproduced" if reach is None or high >= reach else "partly"
    return "contradicted" if high < threshold else "not at this scale"


def claim_verdict(claim: str, low: float, high: float, threshold: float, reach: float | None) -> str:
    """``verdict``, in our own rows' words for ``eagle`` (which drafter is ahead, not a verdict on the paper)."""
    judged = verdict(low, high, threshold, reach)
    if claim == "eagle":
        judged = {"reproduced": "lyanna ahead", "contradicted": "eagle ahead",
                  "not at this scale": "no difference"}.get(judged, judged)
    return judged


def row(claim: str, measure: str, variant: str, against: str, turns: pd.DataFrame | int, measured: Measured | None,
        threshold: float, reach: float | None = None, note: str = "", dataset: str = "all",
        exercised: str = END_TO_END, regime: str = CALIBRATED) -> dict:
    """One row: the statistic, its interval and verdict (``not exercised here`` where ``exercised`` says no), the
    leave-one-prompt-out check (``fragile``: whether one prompt's removal flips it); ``measured`` None: not measured."""
    count = turns if isinstance(turns, int) else len(turns)
    temperature = float(turns.temperature.iloc[0]) if not isinstance(turns, int) and count else np.nan
    value, interval, loo, fragile = np.nan, (np.nan, np.nan), "-", False
    judged = "not measured"
    if measured is not None:
        value, interval = measured.value(), measured.interval()
        judged = claim_verdict(claim, *interval, threshold, reach)
        if judged != "not measured":
            loo, fragile = leave_one_out_check(measured, judged,
                                               lambda low, high: claim_verdict(claim, low, high, threshold, reach))
        if not is_exercised(exercised):
            judged = NOT_EXERCISED
    return {"claim": claim, "measure": measure, "variant": variant, "against": against, "regime": regime,
            "dataset": dataset, "temperature": temperature, "turns": count, "value": value, "ci_low": interval[0],
            "ci_high": interval[1], "threshold": threshold, "exercised": exercised if measured is not None else "-",
            "leave_one_out": loo, "fragile": fragile, "verdict": judged, "note": note}


def clusters(turns: pd.DataFrame) -> np.ndarray:
    """A turn's prompt, across prompt sets: the bootstrap's unit."""
    return (turns.dataset.astype(str) + "/" + turns.prompt_id.astype(str)).to_numpy()


def share_of_sums(numerator: np.ndarray, denominator: np.ndarray, keys: np.ndarray) -> Measured:
    return Measured({"num": numerator, "den": denominator}, keys, lambda sums: sums["num"] / sums["den"])


def waste_rows(turns: pd.DataFrame) -> list[dict]:
    rows = []
    for variant in ("sd", "eagle"):
        mine = turns[turns.variant == variant]
        if mine.empty or not mine.drafted_tokens.sum():
            continue
        rejected = (mine.drafted_tokens - mine.accepted_tokens).to_numpy(float)
        rows.append(row("waste", "share of drafted tokens rejected", variant, "", mine,
                        share_of_sums(rejected, mine.drafted_tokens.to_numpy(float), clusters(mine)), 0.5))
    return rows


def two_share_statistic(mine: pd.DataFrame, theirs: pd.DataFrame, numerator: str, denominator: str,
                        combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Measured:
    """``combine(mine's share, theirs')`` of two variants' ratios of sums (sum of ``numerator`` over sum of
    ``denominator``): both variants' turns resampled together, prompt by prompt."""
    both = pd.concat([mine, theirs])
    side = np.r_[np.ones(len(mine)), np.zeros(len(theirs))]
    top, bottom = both[numerator].to_numpy(float), both[denominator].to_numpy(float)
    columns = {"top_m": top * side, "bottom_m": bottom * side,
               "top_o": top * (1 - side), "bottom_o": bottom * (1 - side)}

    def statistic(sums: dict[str, np.ndarray]) -> np.ndarray:
        return combine(sums["top_m"] / sums["bottom_m"], sums["top_o"] / sums["bottom_o"])

    return Measured(columns, clusters(both), statistic)


def reuse_rows(turns: pd.DataFrame, variant: str = METHOD, against: str = "eagle", regime: str = CALIBRATED,
               note: str = "") -> list[dict]:
    """Drafter-FLOP waste, eagle minus lyanna (both prompt sets' turns resampled together); exercised where both
    drafted deeper than one step."""
    mine, theirs = turns[turns.variant == variant], turns[turns.variant == against]
    if mine.empty or theirs.empty or not mine.drafter_flops.sum() or not theirs.drafter_flops.sum():
        return []
    exercised = depth_exercised(turns, [variant, against], "reuse (keeping deeper drafts)")
    if not is_exercised(exercised) and regime == CALIBRATED:
        note = "; ".join(filter(None, [note, f"the {DEEP} row measures it"]))
    mine, theirs = (rows.assign(drafter_wasted_flops=rows.drafter_flops - rows.drafter_useful_flops)
                    for rows in (mine, theirs))
    measured = two_share_statistic(mine, theirs, "drafter_wasted_flops", "drafter_flops",
                                   lambda lyanna, eagle: eagle - lyanna)
    return [row("reuse", "drafter-FLOP waste, eagle minus lyanna", variant, against, mine, measured, 0.0, note=note,
                exercised=exercised, regime=regime)]


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
                exercised = depth_exercised(turns, [reference, ablation], "tree-building (the injection's trees)")
                rows.append(tau_ratio_row(claim, "tau, token-info over feature injection", turns, reference, ablation,
                                          "; ".join(filter(None, [note, TRAINED_APART])), exercised))
                continue
            if claim == "reuse":
                exercised = depth_exercised(turns, [reference, ablation], "reuse (keeping deeper drafts)")
            else:  # fusion must leave the drafts alone: tau without it over tau with it
                tau_ratio = tau_measured(turns, ablation, reference)
                exercised = tau_exercised(tau_ratio.value() if tau_ratio is not None else np.nan)
            measure = {"reuse": "paired speedup, reuse=logits over reuse=off",
                       "overhead": "paired speedup, verification fusion on over off"}[claim]
            rows.append(speedup_ratio_row(claim, measure, turns, baseline, reference, ablation, 1.0, note=note,
                                          exercised=exercised))
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
                      dataset: str = "all", exercised: str = END_TO_END, regime: str = CALIBRATED) -> dict:
    """The geometric mean over shared turns of variant's paired speedup over against's, with its interval."""
    mine, theirs = turn_speedups(turns, baseline, variant), turn_speedups(turns, baseline, against)
    shared = mine.join(theirs[["speedup"]], rsuffix="_against", how="inner").reset_index()
    if shared.empty:
        return row(claim, measure, variant, against, 0, None, threshold, reach, note or "no shared turns", dataset,
                   regime=regime)
    logs = np.log((shared.speedup / shared.speedup_against).to_numpy(float))
    measured = Measured({"log": logs, "turns": np.ones(len(logs))}, clusters(shared),
                        lambda sums: sums["log"] / sums["turns"], np.exp)
    return row(claim, measure, variant, against, shared, measured, threshold, reach, note, dataset, exercised, regime)


def shared_turns(turns: pd.DataFrame, variant: str, against: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The two variants' turns on the prompts both ran (the same prompts of the same sets)."""
    mine, theirs = turns[turns.variant == variant], turns[turns.variant == against]
    return mine.merge(theirs[TURN_KEY], on=TURN_KEY), theirs.merge(mine[TURN_KEY], on=TURN_KEY)


def tau_measured(turns: pd.DataFrame, variant: str, against: str) -> Measured | None:
    """Tau of ``variant`` over tau of ``against`` on their shared turns (None without any)."""
    mine, theirs = shared_turns(turns, variant, against)
    return None if mine.empty else two_share_statistic(mine, theirs, "accept_length_sum", "verify_steps", np.divide)


def tau_ratio_row(claim: str, measure: str, turns: pd.DataFrame, variant: str, against: str, note: str,
                  exercised: str = END_TO_END, regime: str = CALIBRATED) -> dict:
    """Tau of ``variant`` over tau of ``against`` on the turns both ran."""
    measured = tau_measured(turns, variant, against)
    if measured is None:
        return row(claim, measure, variant, against, 0, None, 1.0, note=note or "no shared turns", regime=regime)
    return row(claim, measure, variant, against, shared_turns(turns, variant, against)[0], measured, 1.0, note=note,
               exercised=exercised, regime=regime)


STANDARD_SD = ("sd", "tree_sd")  # standard speculative decoding: a draft LM's chain, or its Sequoia tree


def better_standard_sd(turns: pd.DataFrame, baseline: pd.DataFrame) -> tuple[str, str]:
    """(the better of calibrated sd and calibrated tree_sd on these turns: the higher geometric mean of paired
    speedups over ar; the other one, or "" when only one ran); ("", "") when neither ran."""
    ran = [variant for variant in STANDARD_SD if not turns[turns.variant == variant].empty]
    ran.sort(key=lambda variant: -np.mean(np.log(turn_speedups(turns, baseline, variant).speedup.to_numpy(float))))
    return (ran + ["", ""])[0], (ran + ["", ""])[1]


def sd_rows(turns: pd.DataFrame, baseline: pd.DataFrame) -> list[dict]:
    """Lyanna over the better of sd and tree_sd (``better_standard_sd``) per prompt set, the best set first (the
    paper's "up to"), then pooled; then pooled over the other one, shown beside."""
    against, other = better_standard_sd(turns, baseline)
    if not against:
        return []
    measure = f"paired speedup, lyanna over {against}"
    chosen = f"the better of sd and tree_sd at this T ({other}: the next row)" if other else ""
    per_set = [speedup_ratio_row("sd", measure, turns[turns.dataset == dataset], baseline, METHOD, against, 1.0,
                                 PAPER_SPEEDUP_OVER_SD, dataset=dataset) for dataset in sorted(turns.dataset.unique())]
    per_set.sort(key=lambda item: -item["value"] if np.isfinite(item["value"]) else np.inf)
    if per_set:
        per_set[0]["note"] = "the best prompt set (the paper's 'up to')"
    rows = per_set + [speedup_ratio_row("sd", measure, turns, baseline, METHOD, against, 1.0, PAPER_SPEEDUP_OVER_SD,
                                        note=chosen)]
    for item in rows:  # another seed's row is found by the rule, whichever of the two it chose (claims_checks.row_key)
        item["compared"] = "the better of sd and tree_sd"
    if other:
        rows.append(speedup_ratio_row("sd", f"paired speedup, lyanna over {other}", turns, baseline, METHOD, other,
                                      1.0, PAPER_SPEEDUP_OVER_SD, note=f"shown beside: {against} is the better")
                    | {"compared": "the other of sd and tree_sd"})
    return rows


def eagle_rows(turns: pd.DataFrame, baseline: pd.DataFrame, variant: str = METHOD, against: str = "eagle",
               regime: str = CALIBRATED, note: str = "") -> list[dict]:
    if turns[turns.variant == against].empty or turns[turns.variant == variant].empty:
        return []
    note = "; ".join(filter(None, [note, parameter_note(turns, variant, against)]))
    return [speedup_ratio_row("eagle", "paired speedup, lyanna over eagle", turns, baseline, variant, against, 1.0,
                              note=note, regime=regime),
            tau_ratio_row("eagle", "tau, lyanna over eagle", turns, variant, against, note, regime=regime)]


def deep_rows(turns: pd.DataFrame, baseline: pd.DataFrame) -> list[dict]:
    """The reuse and lyanna-against-eagle rows again between ``lyanna_deep`` and ``eagle_deep`` (``DEEP_SHAPE``);
    a variant of another shape is said in the note."""
    mine, theirs = DEEP_VARIANTS[METHOD], DEEP_VARIANTS["eagle"]
    if turns[turns.variant == mine].empty or turns[turns.variant == theirs].empty:
        return []
    shapes = {variant: json.loads(turns[turns.variant == variant].options.iloc[0]) for variant in (mine, theirs)}
    off = [f"{variant} ran " + ", ".join(f"{key} {options.get(key)}" for key in DEEP_SHAPE)
           for variant, options in shapes.items() if any(options.get(k) != v for k, v in DEEP_SHAPE.items())]
    note = "; ".join(off)
    return reuse_rows(turns, mine, theirs, DEEP, note) + eagle_rows(turns, baseline, mine, theirs, DEEP, note)
