"""An imported target's regime figures (`python -m harness evaluate-target`): a tiny GGUF Llama converted as the
workflow converts one, answering held-out chat questions; what the report's regime card reads."""

from __future__ import annotations

import json

from harness.cli import main
from harness.store.gguf_import import import_gguf
from tests.helpers import write_tiny_gguf


def test_evaluate_target_measures_repetition_and_entropy_on_its_own_answers(tmp_path):
    target = tmp_path / "target"
    import_gguf(write_tiny_gguf(tmp_path / "tiny.gguf"), target, "float32", {"package": "tiny", "version": "1"})
    questions = tmp_path / "chat-heldout.jsonl"
    questions.write_text("".join(json.dumps({"question_id": index, "category": "test", "turns": [text]}) + "\n"
                                 for index, text in enumerate(["the cat", "in the hat", "a hat on the cat"])))
    out = tmp_path / "metrics" / "target.json"
    assert main(["evaluate-target", "--target", str(target), "--prompts", str(questions), "--limit", "2",
                 "--new-tokens", "8", "--out", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["role"] == "target" and metrics["imported"]["quantisation"] == "Q4_1 dequantised"
    assert metrics["evaluated_on"] == "its answers to 2 held-out chat questions (up to 8 tokens)"
    assert 0 <= metrics["degeneracy"]["repetition_rate"] <= 1 and metrics["sampling"]["samples"] == 2
    assert 0 < metrics["sampling"]["top1_mass"] <= metrics["sampling"]["top10_mass"] <= 1
    assert metrics["parameters"] == metrics["imported"]["parameters"]
