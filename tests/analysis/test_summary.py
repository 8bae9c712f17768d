"""The summary table recomputed by hand from raw records."""

import json

import numpy as np
import pytest

from harness.analysis.summary import bootstrap_interval, records_frame, summarize
from harness.store.records import SCHEMA_VERSION


def _record(role, method, pair, new_tokens, seconds, target_forwards, accepted, drafted, steps, target_tokens,
            drafter_flops=0.0, useful=0.0):
    """A turn of ``steps`` verification steps accepting ``accepted`` drafts in all, spread evenly (the first
    steps one more)."""
    step_accepted = [accepted // steps + (index < accepted % steps) for index in range(steps)]
    return {
        "schema_version": SCHEMA_VERSION, "method": method, "variant": method, "role": role, "compared_method": "sd", "dataset": "d",
        "sampling": {"temperature": 0.0}, "pair_id": pair, "prompt_tokens": 10,
        "counters": {
            "new_tokens": new_tokens, "wall_seconds": seconds, "accepted_tokens": accepted, "drafted_tokens": drafted,
            "step_accepted": step_accepted, "target": {"forwards": target_forwards, "tokens": target_tokens,
                                                     "flops": 1000.0 * target_tokens},
            "drafter": {"forwards": steps, "tokens": drafted, "flops": drafter_flops},
            "extra": {"drafter_useful_flops": useful},
        },
    }


def test_summary_matches_hand_computation(tmp_path):
    records = [
        _record("method", "sd", "a", 20, 1.0, 9, 12, 32, 8, 10 + 40, drafter_flops=800.0, useful=200.0),
        _record("baseline", "ar", "a", 20, 2.0, 20, 0, 0, 19, 10 + 19),
        _record("method", "sd", "b", 10, 1.0, 5, 5, 16, 4, 10 + 20, drafter_flops=400.0, useful=100.0),
        _record("baseline", "ar", "b", 10, 1.0, 10, 0, 0, 9, 10 + 9),
    ]
    path = tmp_path / "sd.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    table = summarize(records_frame([path])).set_index("variant")
    sd = table.loc["sd"]
    # tau, EAGLE/Spec-Bench: accepted + 1 per verification step, the prefill no step, cut at the turn's end.
    # a: steps accept [2, 2, 2, 2, 1, 1, 1, 1] -> 20 tokens in 8 steps (its 20 new tokens: the last bonus cut);
    # b: [2, 1, 1, 1] -> 9 in 4 steps (the 10th new token is the last forward's bonus, in no step's count)
    assert sd.tau == pytest.approx((20 + 9) / (8 + 4))
    assert sd.tokens_per_forward == pytest.approx(30 / 14)  # prefill forward and last bonus counted
    assert sd.accepted_per_step == pytest.approx(17 / 12)
    assert sd.token_waste == pytest.approx(1 - 17 / 48)
    assert sd.drafter_flop_waste == pytest.approx(1 - 300 / 1200)
    assert sd.drafter_wasted_flops_per_accepted == pytest.approx(900 / 17)
    assert sd.verify_waste == pytest.approx(1 - (17 + 12) / 60)
    assert sd.flops_per_token == pytest.approx((1000 * (50 + 30) + 1200) / 30)
    ratios = np.array([(20 / 1.0) / (20 / 2.0), (10 / 1.0) / (10 / 1.0)])
    assert sd.speedup_paired_mean == pytest.approx(np.exp(np.log(ratios).mean()))
    assert sd.speedup_total == pytest.approx((30 / 2.0) / (30 / 3.0))
    assert sd.speedup_ci_low <= sd.speedup_paired_mean <= sd.speedup_ci_high
    assert sd.efficiency == pytest.approx(np.exp(np.log(ratios).mean()) / (30 / 14))
    # Spec-Bench's: mean per-prompt tokens/s of sd over ar's
    assert sd.speedup_specbench == pytest.approx(((20 / 1.0 + 10 / 1.0) / 2) / ((20 / 2.0 + 10 / 1.0) / 2))


def test_bootstrap_interval():
    values = np.random.default_rng(1).normal(1.5, 0.2, size=400)
    low, high = bootstrap_interval(values)
    assert low < values.mean() < high and high - low == pytest.approx(2 * 1.96 * 0.2 / 20, rel=0.25)
    assert bootstrap_interval(values) == (low, high)  # fixed seed
