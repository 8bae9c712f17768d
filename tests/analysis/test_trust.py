"""The report's warning block: the A/A control outside +-3%, weak models let through, diverged greedy turns."""

import json

import pandas as pd

from harness.analysis.trust import control_failures, diverged_variants, trust_warnings, warning_block


def summary(control: float, diverged: float) -> pd.DataFrame:
    return pd.DataFrame([
        {"variant": "ar_control", "method": "ar", "dataset": "stdlib_code", "temperature": 0.0, "turns": 10,
         "speedup_paired_mean": control, "diverged_turns": 0.0},
        {"variant": "eagle", "method": "eagle", "dataset": "stdlib_code", "temperature": 0.0, "turns": 10,
         "speedup_paired_mean": 1.5, "diverged_turns": diverged},
        {"variant": "eagle", "method": "eagle", "dataset": "stdlib_code", "temperature": 1.0, "turns": 10,
         "speedup_paired_mean": 0.8, "diverged_turns": float("nan")},
    ])


def test_a_sound_run_has_no_warning_block(tmp_path):
    assert trust_warnings(summary(1.01, 0.0), []) == [] and warning_block([]) == ""


def test_control_diverged_and_weak_models_are_each_a_line(tmp_path):
    metrics = tmp_path / "target.json"
    metrics.write_text(json.dumps({"gate": {"failures": ["target: looping share 1 is above the maximum 0.5 "
                                                         "(gates: max_looping_share)"]}}))
    table = summary(1.444, 3.0)
    assert list(control_failures(table).variant) == ["ar_control"] and diverged_variants(table) == {"eagle": 3}
    lines = trust_warnings(table, [metrics])
    assert len(lines) == 3
    assert "reads 1.444 on stdlib_code at T = 0" in lines[0]
    assert "looping share 1 is above the maximum 0.5" in lines[1]
    assert lines[2].startswith("`eagle`: 3 of 10 greedy turns left their paired `ar` output")
    assert warning_block(lines).startswith("> **Do not trust these results without reading this.**")
