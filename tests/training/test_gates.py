"""Quality gates after training: each figure against its threshold, one line that names the figure, the threshold
and what to do; allow_weak_models keeps the failures for the report instead of stopping."""

import pytest

from harness.errors import DraftcountError
from harness.training.gates import apply_gates, gate_failures, heldout_agreement

LOOPING_TARGET = {"heldout_perplexity": 544.0, "degeneracy": {"repetition_rate": 0.957, "looping_share": 1.0}}
GOOD_TARGET = {"heldout_perplexity": 57.1, "degeneracy": {"repetition_rate": 0.2, "looping_share": 0.0}}
TARGET_GATES = {"max_heldout_perplexity": 150, "max_repetition_rate": 0.6, "max_looping_share": 0.5}


def test_a_looping_target_fails_every_target_gate():
    failures = gate_failures("target", LOOPING_TARGET, TARGET_GATES)
    assert len(failures) == 3
    assert failures[0] == ("target: held-out perplexity 544 is above the maximum 150 "
                           "(gates: max_heldout_perplexity)")
    assert gate_failures("target", GOOD_TARGET, TARGET_GATES) == []


def test_the_stop_is_one_line_with_the_way_on():
    with pytest.raises(DraftcountError) as error:
        apply_gates("target", LOOPING_TARGET, TARGET_GATES, allow_weak=False)
    message = str(error.value)
    assert "\n" not in message and "544" in message and "150" in message and "allow_weak_models=true" in message


def test_allowed_weak_models_carry_their_failures(capsys):
    metrics = apply_gates("target", LOOPING_TARGET, TARGET_GATES, allow_weak=True)
    assert metrics["gate"]["allowed_weak"] and len(metrics["gate"]["failures"]) == 3
    assert capsys.readouterr().out.count("warning: weak model") == 3
    passed = apply_gates("target", GOOD_TARGET, TARGET_GATES, allow_weak=False)
    assert passed["gate"] == {"thresholds": TARGET_GATES, "failures": [], "allowed_weak": False}


def test_drafter_agreement_at_the_first_step_or_depth():
    assert heldout_agreement({"heldout_top1_agreement_by_step": [0.65, 0.66]}) == 0.65
    assert heldout_agreement({"heldout_top1_agreement_by_step": [0.41, 0.36]}) == 0.41
    weak = {"heldout_top1_agreement_by_step": [0.10, 0.07]}
    assert gate_failures("drafter lyanna_feature", weak, {"min_heldout_agreement": 0.2}) == [
        "drafter lyanna_feature: held-out top-1 agreement (first step) 0.1 is below the minimum 0.2 "
        "(gates: min_heldout_agreement)"]
    assert gate_failures("drafter x", {}, {"min_heldout_agreement": 0.2}) == []  # a figure it lacks is not checked


def test_an_unknown_gate_is_an_error():
    with pytest.raises(DraftcountError, match="unknown quality gate 'max_loss'"):
        gate_failures("target", GOOD_TARGET, {"max_loss": 3.0})
