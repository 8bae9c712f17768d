"""The paper's claims, judged (``methods/lyanna/claims.py``): verdicts from intervals, the speedup ratio of two
variants over their shared turns, an ablation measured against the same-shape reference, and a claim no variant
of the run can judge said once as not measured."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from methods.lyanna.claims import claims_table, verdict
from methods.lyanna.claims_section import claims_section

SHAPE = {"top_k": 4, "depth": 5, "budget": 24}
DEFAULTS = {"reuse": "logits", "verify_fusion": "on", "inject": "token_info", "overlap": "off"}


def turns(variant: str, method: str, speed: float, prompts: int = 12, drafted: int = 0, accepted: int = 0,
          options: dict | None = None, details: dict | None = None, seed: int = 0) -> list[dict]:
    """Two turns per prompt of ``variant`` at ``speed`` x ar's tokens/s (with a little noise), each with its `ar`
    turn; drafts, drafter FLOPs (half useful) and accept lengths as given."""
    rng = np.random.default_rng(seed)
    rows = []
    for prompt in range(prompts):
        for turn in range(2):
            pair = f"p{prompt}#{turn}"
            common = {"run": f"{variant}.jsonl", "dataset": "set_a" if prompt % 2 else "set_b", "temperature": 0.0,
                      "pair_id": pair, "prompt_id": f"p{prompt}", "sample": 0, "repeat": 0, "new_tokens": 64}
            ar_seconds = 1.0 + 0.1 * rng.random()
            rows.append({**common, "role": "baseline", "variant": "ar", "method": "ar", "wall_seconds": ar_seconds,
                         "drafted_tokens": 0, "accepted_tokens": 0, "drafter_flops": 0.0,
                         "drafter_useful_flops": 0.0, "accept_length_sum": 64, "verify_steps": 64, "options": "{}",
                         "details": "{}", "phase_host": 0.0})
            rows.append({**common, "role": "method", "variant": variant, "method": method,
                         "wall_seconds": ar_seconds / speed * (1 + 0.02 * rng.standard_normal()),
                         "drafted_tokens": drafted, "accepted_tokens": accepted, "drafter_flops": 100.0,
                         "drafter_useful_flops": 50.0, "accept_length_sum": 64, "verify_steps": 64 // max(speed, 1),
                         "options": json.dumps({**SHAPE, "drafter": "drafters/lyanna", **(options or {})}),
                         "details": json.dumps({**DEFAULTS, **(details or {})}), "phase_host": 0.0})
    return rows


def test_verdicts_read_the_interval_against_the_threshold():
    assert verdict(1.2, 1.5, 1.0) == "reproduced" and verdict(0.6, 0.9, 1.0) == "contradicted"
    assert verdict(0.9, 1.1, 1.0) == "not at this scale" and verdict(np.nan, np.nan, 1.0) == "not measured"
    assert verdict(1.5, 2.0, 1.0, reach=3.3) == "partly" and verdict(2.9, 3.4, 1.0, reach=3.3) == "reproduced"


@pytest.mark.parametrize("speed,expected", [(4.0, "reproduced"), (2.0, "partly"), (0.5, "contradicted")])
def test_lyanna_over_sd_is_the_ratio_of_paired_speedups_judged_against_3_3x(speed, expected):
    frame = pd.DataFrame(turns("sd", "sd", 1.0, drafted=10, accepted=2) + turns("lyanna", "lyanna", speed, seed=1))
    rows = claims_table(frame)
    sd = rows[rows.claim == "sd"]
    pooled = sd[sd.dataset == "all"].iloc[0]
    assert pooled.value == pytest.approx(speed, rel=0.03) and pooled.ci_low < pooled.value < pooled.ci_high
    assert pooled.verdict == expected and pooled.turns == 24
    assert set(sd.dataset) == {"set_a", "set_b", "all"} and sd.iloc[0].note.startswith("the best prompt set")
    waste = rows[rows.claim == "waste"].iloc[0]  # sd rejects 8 of its 10 drafts
    assert (waste.variant, waste.value, waste.verdict) == ("sd", pytest.approx(0.8), "reproduced")


def test_an_ablation_is_measured_against_the_same_shape_reference_and_missing_claims_are_said_once():
    frame = pd.DataFrame(
        turns("lyanna", "lyanna", 1.5, options={"depth": 1, "budget": 1})  # the main variant: another shape
        + turns("lyanna_b24", "lyanna", 1.2, seed=1)
        + turns("lyanna_reuse_off", "lyanna", 0.6, options={"reuse": "off"}, details={"reuse": "off"}, seed=2))
    rows = claims_table(frame)
    reuse = rows[(rows.claim == "reuse") & rows.against.eq("lyanna_reuse_off")].iloc[0]
    assert reuse.variant == "lyanna_b24" and reuse.value == pytest.approx(2.0, rel=0.03)
    assert reuse.verdict == "reproduced" and reuse.note == ""
    missing = rows[rows.verdict == "not measured"]
    assert sorted(missing.claim) == ["injection", "overhead", "sd"]  # once each, not once per temperature
    without_reference = claims_table(frame[frame.variant != "lyanna_b24"])
    fallback = without_reference[without_reference.against.eq("lyanna_reuse_off")].iloc[0]
    assert fallback.variant == "lyanna" and fallback.note.startswith("shapes differ: lyanna ran depth 1, budget 1")


def test_no_lyanna_no_claims_and_the_section_lists_every_row():
    frame = pd.DataFrame(turns("sd", "sd", 1.0, drafted=10, accepted=2))
    assert claims_table(frame).empty and claims_section(claims_table(frame)) == ""
    table = claims_table(pd.DataFrame(turns("sd", "sd", 1.0, drafted=10, accepted=2)
                                      + turns("lyanna", "lyanna", 2.0, seed=1)))
    section = claims_section(table)
    assert section.count("\n| ") == len(table) and "**partly**" in section and "**not measured**" in section


def test_over_standard_sd_is_judged_against_the_better_of_sd_and_tree_sd_and_shows_both(tmp_path):
    """Issue 79: tree_sd runs at 1.5x ar, sd at 0.6x: lyanna (3x) is judged over tree_sd (2x, partly), and its ratio
    over sd (5x) stands beside; the draft LM's quality stands beside the verdict."""
    from methods.lyanna.claims import better_standard_sd, sd_rows
    from methods.lyanna.claims_section import draft_lm_sentence

    frame = pd.DataFrame(turns("sd", "sd", 0.6, drafted=10, accepted=2) + turns("tree_sd", "tree_sd", 1.5, seed=2)
                         + turns("lyanna", "lyanna", 3.0, seed=1))
    methods, baseline = frame[frame.role == "method"], frame[frame.role == "baseline"].set_index(["run", "pair_id"])
    assert better_standard_sd(methods, baseline) == ("tree_sd", "sd")
    assert better_standard_sd(methods[methods.variant != "tree_sd"], baseline) == ("sd", "")
    rows = pd.DataFrame(sd_rows(methods, baseline))
    judged, beside = rows[rows.dataset == "all"].iloc[0], rows[rows.dataset == "all"].iloc[1]
    assert judged.against == "tree_sd" and judged.value == pytest.approx(2.0, rel=0.03) and judged.verdict == "partly"
    assert beside.against == "sd" and beside.value == pytest.approx(5.0, rel=0.03) and "tree_sd is the better" in \
        beside.note
    assert set(rows[rows.dataset != "all"].against) == {"tree_sd"}  # the "up to" rows: over the better one
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps({"heldout_perplexity": 388.2, "top1_agreement_with_target": 0.31,
                                 "training": {"tokens": 122880}}))
    assert draft_lm_sentence([tmp_path / "target.json", draft]) == (
        "The draft LM of sd and tree_sd: held-out perplexity 388.2, top-1 agreement with the target 0.310, trained on "
        "122,880 positions.")
    assert draft_lm_sentence([]) == ""


def scaled(frame: pd.DataFrame, variant: str, prompt: str, factor: float) -> pd.DataFrame:
    """``variant``'s turns of ``prompt`` taking ``factor`` times as long (its speed over ar divided by it)."""
    rows = (frame.variant == variant) & (frame.prompt_id == prompt)
    return frame.assign(wall_seconds=frame.wall_seconds.where(~rows, frame.wall_seconds * factor))


def test_a_reuse_row_from_depth_1_is_not_exercised_and_the_deep_shape_rows_measure_it():
    depth_1 = {"top_k": 4, "depth": 1, "budget": 1}
    frame = pd.DataFrame(turns("lyanna", "lyanna", 1.2, options=depth_1) + turns("eagle", "eagle", 1.2, options=depth_1,
                                                                                  seed=1)
                         + turns("lyanna_deep", "lyanna", 1.5, seed=2) + turns("eagle_deep", "eagle", 1.0, seed=3))
    frame.loc[frame.variant == "eagle", "drafter_useful_flops"] = 10.0  # eagle wastes 90% of its drafter's work
    rows = claims_table(frame)
    calibrated = rows[(rows.claim == "reuse") & (rows.regime == "calibrated")].iloc[0]
    assert calibrated.verdict == "not exercised here" and calibrated.value == pytest.approx(0.4)  # the figure stays
    assert calibrated.exercised.startswith("no: lyanna depth 1, eagle depth 1") and "deep shape" in calibrated.note
    deep = rows[rows.regime.str.startswith("deep shape")]
    assert set(deep.claim) == {"reuse", "eagle"} and set(deep.variant) == {"lyanna_deep"}
    assert deep[deep.claim == "reuse"].iloc[0].exercised == "yes: lyanna_deep depth 5, eagle_deep depth 5"
    speed = deep[deep.measure == "paired speedup, lyanna over eagle"].iloc[0]
    assert speed.verdict == "lyanna ahead" and speed.value == pytest.approx(1.5, rel=0.03)
    assert deep[deep.claim == "reuse"].iloc[0].verdict not in ("not exercised here", "not measured")
    ends = rows[rows.claim.isin(["waste", "sd", "eagle"]) & (rows.regime == "calibrated") & (rows.turns > 0)]
    assert (ends.exercised == "yes: end to end").all()  # end-to-end claims need no particular shape


def test_the_fusion_ablation_is_judged_only_where_tau_equals_the_fused_variants():
    fused = turns("lyanna", "lyanna", 1.3, options={"depth": 1, "budget": 1}) + turns("lyanna_b24", "lyanna", 1.2, seed=1)
    unfused = turns("lyanna_unfused", "lyanna", 1.1, details={"verify_fusion": "off"}, seed=2)
    frame = pd.DataFrame(fused + unfused)
    overhead = claims_table(frame).query("claim == 'overhead'").iloc[0]
    assert overhead.verdict == "not exercised here" and "fusion changed the drafts" in overhead.exercised
    same_tau = frame.verify_steps.where(frame.variant != "lyanna_unfused",
                                        float(frame[frame.variant == "lyanna_b24"].verify_steps.iloc[0]))
    overhead = claims_table(frame.assign(verify_steps=same_tau)).query("claim == 'overhead'").iloc[0]
    assert overhead.exercised.startswith("yes: tau equal") and overhead.verdict == "reproduced"


def test_a_verdict_one_prompt_carries_reads_fragile():
    """Eleven prompts where lyanna is 1.1x eagle and one where it is half as fast: pooled, the interval holds 1;
    without that prompt, lyanna is ahead."""
    frame = pd.DataFrame(turns("lyanna", "lyanna", 1.1) + turns("eagle", "eagle", 1.0, seed=1))
    rows = claims_table(scaled(frame, "lyanna", "p0", 2.2))
    speed = rows[rows.measure == "paired speedup, lyanna over eagle"].iloc[0]
    assert speed.verdict == "fragile" and speed.ci_low < 1 < speed.ci_high
    assert speed.leave_one_out.startswith("flips to 'lyanna ahead' without set_b/p0")
    steady = claims_table(frame)
    speed = steady[steady.measure == "paired speedup, lyanna over eagle"].iloc[0]
    assert speed.verdict == "lyanna ahead" and speed.leave_one_out == "stable (12 prompts)"


@pytest.mark.parametrize("eagle_seed1,expected", [(1.0, "lyanna ahead"), (1.2, "not decided")])
def test_a_verdict_stands_only_where_every_seed_gives_it(eagle_seed1, expected):
    frame = pd.DataFrame(turns("lyanna", "lyanna", 1.2) + turns("eagle", "eagle", 1.0, seed=1)
                         + turns("lyanna_seed1", "lyanna", 1.2, seed=2)
                         + turns("eagle_seed1", "eagle", eagle_seed1, seed=3) + turns("sd", "sd", 1.0, seed=4))
    rows = claims_table(frame)
    speed = rows[rows.measure == "paired speedup, lyanna over eagle"].iloc[0]
    assert speed.verdict == expected and speed.seeds.startswith("seed 0: lyanna ahead (1.1")
    assert "seed 1: " + ("lyanna ahead" if eagle_seed1 == 1.0 else "no difference") in speed.seeds
    assert not rows.variant.str.contains("_seed").any()  # the seeds' variants stand in for the main ones
    sd = rows[(rows.claim == "sd") & (rows.dataset == "all")].iloc[0]  # lyanna's seeds, sd's one model
    assert "seed 1: partly" in sd.seeds and sd.verdict == "partly"


def test_the_claims_regime_sentence_gives_the_pairs_calibrated_shapes(tmp_path):
    """Issue 80 item 4: beside the claims, the paper's pair's calibrated depth and budget per rung and temperature,
    the accepted tokens a step the calibration expected and the run's tau; other variants are left to the card."""
    from methods.lyanna.claims_section import shapes_sentence

    rows = []
    for variant, depth in (("lyanna", 1), ("eagle_seed1", 3), ("dream", 2)):
        shape = tmp_path / f"shape-{variant}.json"
        shape.write_text(json.dumps({"depth": depth, "budget": depth * 2, "accepted_per_step": 1.25}))
        rows.append({"variant": variant, "temperature": 0.0, "turns": 22, "tau": 1.5,
                     "options": json.dumps({"drafter": variant, "shape_file": str(shape)})})
    sentence = shapes_sentence(pd.DataFrame(rows))
    assert "eagle_seed1 (1x) at T = 0: depth 3, budget 6, 1.25 accepted a step calibrated, tau 1.50" in sentence
    assert "lyanna (1x) at T = 0: depth 1, budget 2" in sentence and "dream" not in sentence
    assert shapes_sentence(pd.DataFrame(rows[2:])) == ""


@pytest.mark.parametrize("eagle_target1,expected", [(1.0, "lyanna ahead"), (1.2, "not decided")])
def test_a_verdict_stands_only_where_both_target_seeds_give_it(eagle_target1, expected):
    """Issue 79 item 4: the zoo's target retrained with another seed (config target_seeds, its runs named
    <variant>_target1 with their own `ar` turns) measures again every row whose variants all ran there; a row it did
    not run (the ablation against lyanna_b24) rests on target seed 0 alone, and the seeds column says so."""
    frame = pd.DataFrame(turns("lyanna", "lyanna", 1.2) + turns("eagle", "eagle", 1.0, seed=1)
                         + turns("lyanna_b24", "lyanna", 1.2, seed=2)
                         + turns("lyanna_reuse_off", "lyanna", 0.6, options={"reuse": "off"}, details={"reuse": "off"},
                                 seed=3)
                         + turns("lyanna_target1", "lyanna", 1.2, seed=4)
                         + turns("eagle_target1", "eagle", eagle_target1, seed=5))
    rows = claims_table(frame)
    assert not rows.variant.str.contains("_target").any() and not rows.against.str.contains("_target").any()
    speed = rows[rows.measure == "paired speedup, lyanna over eagle"].iloc[0]
    assert speed.verdict == expected and speed.seeds.startswith("seed 0: lyanna ahead (1.1")
    assert "; target seed 1: " + ("lyanna ahead" if eagle_target1 == 1.0 else "no difference") in speed.seeds
    ablation = rows[(rows.claim == "reuse") & (rows.against == "lyanna_reuse_off")].iloc[0]
    assert ablation.seeds == f"seed 0: reproduced ({ablation.value:.3g})" and ablation.verdict == "reproduced"


def test_each_target_seed_judges_lyanna_against_its_own_better_standard_sd():
    """Over standard SD is judged against the better of sd and tree_sd on each target: target seed 1's better is
    tree_sd where seed 0's is sd, and its rows still count (named by the rule), the seeds column saying which."""
    target0 = turns("sd", "sd", 1.5, drafted=10, accepted=2) + turns("tree_sd", "tree_sd", 1.2, seed=1)
    target1 = turns("sd_target1", "sd", 1.1, drafted=10, accepted=2, seed=2) + turns("tree_sd_target1", "tree_sd",
                                                                                     1.5, seed=3)
    frame = pd.DataFrame(target0 + target1 + turns("lyanna", "lyanna", 3.0, seed=4)
                         + turns("lyanna_target1", "lyanna", 1.5, seed=5))
    rows = claims_table(frame)
    pooled = rows[(rows.claim == "sd") & (rows.dataset == "all")]
    better, beside = pooled.iloc[0], pooled.iloc[1]
    assert (better.against, beside.against) == ("sd", "tree_sd")
    assert better.seeds.startswith("seed 0: partly (2") and better.verdict == "not decided"
    assert "; target seed 1: not at this scale (1" in better.seeds and better.seeds.endswith(" over tree_sd)")
    assert "target seed 1: " in beside.seeds and "over sd)" in beside.seeds  # the other one, on each target
    per_set = rows[(rows.claim == "sd") & (rows.dataset != "all")]
    assert len(per_set) == 2 and per_set.seeds.str.contains("target seed 1: ").all()
