"""The polybasic cost rule: hand numbers where the mid model pays and where it does not, and the table from
records of a run."""

from __future__ import annotations

import json

import pytest

from methods.polybasic.view import (
    ChainMeasurements, cost_rule, cost_rule_table, cost_rule_markdown, polybasic_seconds_per_token, sd_seconds_per_token,
)
from harness.analysis.summary import records_frame
from harness.store.records import SCHEMA_VERSION

SD = dict(t_ar=0.010, t_target_sd=0.011, t_small_sd=0.001, gamma=4, l_sd=2.0)


def test_seconds_per_token_on_hand_numbers():
    assert sd_seconds_per_token(0.011, 0.001, 4, 2.0) == pytest.approx(0.0075)
    # K / L_in = 2 inner rounds of (mid + 4 small) per step of 5 tokens
    assert polybasic_seconds_per_token(0.012, 0.002, 0.001, 8, 4, 5.0, 4.0) == pytest.approx(0.0048)


def test_inserting_the_mid_pays():
    verdict = cost_rule(ChainMeasurements(**SD, t_target_poly=0.012, t_mid=0.002, t_small_poly=0.001, block=8,
                                          gamma_inner=4, l_outer=5.0, l_inner=4.0))
    assert verdict.predicted_sd_speedup == pytest.approx(0.010 / 0.0075)
    assert verdict.predicted_polybasic_speedup == pytest.approx(0.010 / 0.0048)
    assert verdict.mid_accept_length == pytest.approx(2.5)  # the paper's L_2 = L_1 L_in / K
    assert verdict.insert_mid


def test_inserting_a_slow_poorly_aligned_mid_does_not_pay():
    verdict = cost_rule(ChainMeasurements(**SD, t_target_poly=0.012, t_mid=0.006, t_small_poly=0.001, block=8,
                                          gamma_inner=4, l_outer=2.5, l_inner=2.0))
    assert verdict.polybasic_seconds_per_token == pytest.approx((0.012 + 4 * (0.006 + 0.004)) / 2.5)
    assert verdict.predicted_polybasic_speedup < 1 < verdict.predicted_sd_speedup
    assert not verdict.insert_mid


def _record(variant: str, role: str, tokens: int, step_accepted: list[int], target_seconds: float,
            drafter_forwards: int = 0, drafter_seconds: float = 0.0, wall: float = 1.0, extra=None,
            options=None) -> dict:
    counters = {"new_tokens": tokens, "wall_seconds": wall,
                "phase_seconds": {"prefill": 0.01, "target": target_seconds, "drafter": drafter_seconds,
                                  "verify": 0.0, "host": 0.0},
                "target": {"forwards": len(step_accepted) + 1, "tokens": 100, "flops": 1.0},
                "drafter": {"forwards": drafter_forwards, "tokens": drafter_forwards, "flops": 1.0},
                "accepted_tokens": sum(step_accepted), "drafted_tokens": tokens, "step_accepted": step_accepted,
                "accepted_by_depth": [], "extra": extra or {}, "trace": {}}
    return {"schema_version": SCHEMA_VERSION, "method": variant if role == "method" else "ar", "variant": variant,
            "role": role, "compared_method": variant, "dataset": "d", "sampling": {"temperature": 0.0},
            "pair_id": f"p#{variant}", "prompt_tokens": 10, "counters": counters, "method_options": options or {}}


def test_cost_rule_table_from_records(tmp_path):
    poly_extra = {"polybasic_mid_forwards": 16, "polybasic_mid_seconds": 16 * 0.002,
                  "polybasic_small_forwards": 64, "polybasic_small_seconds": 64 * 0.001,
                  "polybasic_inner_rounds": 16, "polybasic_inner_accepted": 48}
    records = [
        _record("sd", "baseline", 40, [0] * 40, 40 * 0.010, wall=0.45),
        _record("polybasic", "baseline", 40, [0] * 40, 40 * 0.010, wall=0.45),
        _record("sd", "method", 40, [1] * 20, 20 * 0.011, 80, 80 * 0.001, wall=0.30, options={"gamma": 4}),
        _record("polybasic", "method", 40, [4] * 8, 8 * 0.012, 80, 0.096, wall=0.20, extra=poly_extra,
                options={"block": 8, "gamma_inner": 4}),
    ]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    table = cost_rule_table(records_frame([path]))
    assert len(table) == 1
    row = table.iloc[0]
    assert (row.l_sd, row.l_outer, row.l_inner, row.block, row.gamma) == pytest.approx((2.0, 5.0, 4.0, 8, 4))
    assert (row.t_ar, row.t_mid, row.t_small_poly) == pytest.approx((0.010, 0.002, 0.001))
    assert row.predicted_polybasic_speedup == pytest.approx(0.010 / 0.0048)
    assert row.insert_mid and row.measured_polybasic_speedup == pytest.approx(0.45 / 0.20)
    section = cost_rule_markdown(table)
    assert section.startswith("| dataset |") and "| d | 0 |" in section and "| yes |" in section
    assert cost_rule_markdown(table.iloc[:0]) == ""
