"""The regime card: the target's quality and sampled-text figures, its cost ratios from the summary, and the
sentence against the committed H100 latencies."""

import json

import pandas as pd

from harness.analysis.regime import H100_LATENCIES, cost_ratios, h100_reference, regime_card, transfer_sentence

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
