"""The paper's claims, judged (``methods/lyanna/claims.py``): verdicts from intervals, the speedup ratio of two
variants over their shared turns, an ablation measured against the same-shape reference, and a claim no variant
of the run can judge said once as not measured."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from methods.lyanna.claims import claims_section, claims_table, verdict

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
