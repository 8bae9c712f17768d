"""The drafter-family table and the head-to-head comparisons, on hand-made summary rows."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.analysis.families import (
    comparison_rows, comparison_table, data_source_rows, data_source_table, family_table, parse_comparisons,
    published_table,
)


def _summary() -> pd.DataFrame:
    base = {"dataset": "code", "temperature": 0.0, "speedup_ci_low": 1.0, "speedup_ci_high": 2.0,
            "drafter_flop_waste": 0.5}
    rows = [
        {"variant": "eagle", "tau": 2.0, "speedup_paired_mean": 1.5, "drafter_parameters": 1e6,
         "drafter_flops_per_step": 4e6, "draft_vocab": 8192.0},
        {"variant": "prism", "tau": 2.2, "speedup_paired_mean": 1.65, "drafter_parameters": 2e6,
         "drafter_flops_per_step": 4e6},
        {"variant": "ar", "tau": 1.0, "speedup_paired_mean": 1.0, "drafter_parameters": 0.0,
         "drafter_flops_per_step": 0.0},
    ]
    return pd.DataFrame([{**base, **row} for row in rows])


def test_comparison_gives_the_change_of_tau_and_the_cost_ratios():
    joined = comparison_rows(_summary(), {"prism": "eagle"})
    assert len(joined) == 1
    row = joined.iloc[0]
    assert row.tau_change == pytest.approx(0.1)
    assert row.speedup_change == pytest.approx(0.1)
    assert row.parameter_ratio == pytest.approx(2.0)  # M = 2 modules ...
    assert row.flops_per_step_ratio == pytest.approx(1.0)  # ... one of them per step
    table = comparison_table(_summary(), {"prism": "eagle"})
    assert "+10.0%" in table and "2.00x" in table and "1.00x" in table


def test_a_comparison_whose_variants_did_not_run_is_left_out():
    assert comparison_table(_summary(), {"owl": "eagle"}) == ""
    assert comparison_rows(_summary(), {"prism": "eagle", "owl": "eagle"}).variant.tolist() == ["prism"]


def test_published_figures_stand_beside_ours_per_dataset_and_temperature():
    table = published_table(_summary(), {"eagle": {"source": "EAGLE-2", "setting": "Vicuna-7B", "speedup_t0": 3.05},
                                         "owl": {"source": "OWL", "speedup_t0": 2.0}})
    lines = table.splitlines()
    assert len(lines) == 3  # header, rule, eagle on code (owl did not run)
    assert lines[2].startswith("| eagle | code | 2.00 / 1.50") and "| - |" in lines[2]  # no T = 1 run
    assert "3.05x" in lines[2] and "EAGLE-2 (Vicuna-7B)" in lines[2]
    assert published_table(_summary(), {"owl": {"source": "OWL"}}) == ""


def test_family_table_keeps_the_order_given_and_shows_both_costs():
    table = family_table(_summary(), ["prism", "eagle"])
    lines = table.splitlines()
    assert lines[2].startswith("| prism") and lines[3].startswith("| eagle")
    assert "2.000" in lines[2] and "4.00" in lines[2]  # 2M parameters, 4 MFLOPs per step
    assert "| 8192 |" in lines[3] and "draft vocab" in lines[0]  # eagle's draft vocabulary (prism's: not recorded)
    assert family_table(_summary(), ["owl"]) == ""


def test_comparisons_are_parsed_with_one_line_errors():
    assert parse_comparisons("prism=eagle, eagle_gto=eagle") == {"prism": "eagle", "eagle_gto": "eagle"}
    assert parse_comparisons("") == {}
    with pytest.raises(ValueError, match="VARIANT=BASELINE"):
        parse_comparisons("prism")


def test_the_family_table_shows_drafter_forwards_per_step_and_per_token():
    summary = _summary().assign(drafter_forwards_per_step=[6.0, 6.0, 0.0], drafter_forwards_per_token=[2.5, 2.2, 0.0])
    table = family_table(summary, ["eagle", "prism"])
    assert "drafter fwd/step" in table and "| 6.00 | 2.50 |" in table


def test_regenerated_drafters_are_set_beside_their_methods_corpus_variant():
    base = {"dataset": "code", "temperature": 1.0, "speedup_ci_low": 0.9, "speedup_ci_high": 1.1}
    summary = pd.DataFrame([{**base, **row} for row in [
        {"variant": "eagle", "method": "eagle", "tau": 1.2, "speedup_paired_mean": 0.9, "drafter_data": "corpus"},
        {"variant": "eagle_regen", "method": "eagle", "tau": 1.5, "speedup_paired_mean": 1.1,
         "drafter_data": "regenerated"},
        {"variant": "dflash_regen", "method": "dflash", "tau": 1.9, "speedup_paired_mean": 1.2,
         "drafter_data": "regenerated"},  # no corpus dflash ran: left out
    ]])
    rows = data_source_rows(summary, ["eagle", "dflash"])
    assert rows.variant.tolist() == ["eagle_regen"] and rows.variant_base.tolist() == ["eagle"]
    assert rows.tau_change.iloc[0] == pytest.approx(0.25)
    table = data_source_table(summary, ["eagle", "dflash"])
    assert "+25.0%" in table and "0.90 [0.90, 1.10]" in table and "1.10 [0.90, 1.10]" in table
    assert data_source_table(summary.assign(drafter_data="corpus"), ["eagle"]) == ""
