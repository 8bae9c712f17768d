"""The data table of a chat target's training set: questions and answer tokens by source, what each lost, and the
overlap check recounted from the question files."""

from __future__ import annotations

import csv
import json
from collections import Counter

from harness.cli import main
from harness.data.data_table import DATA_FIELDS, data_rows, filter_rows

CHAT = {"sources": {"gsm8k": {"offered": 10, "dropped": {"benchmark_turn": 2, "duplicate_near": 1}},
                    "synth": {"offered": 5, "dropped": {"duplicate_exact": 1}}}}
SYNTH = {"written": 12, "kept": 5, "filtered": {"unfinished": 3, "language": 1},
         "dropped": {"duplicate_near": 2, "benchmark_8gram": 1},
         "sampling": {"temperature": 1.0, "top_p": 0.95, "max_tokens": 96}}
REGENERATE = {"answer_tokens_by_source": {"gsm8k": 600, "synth": 200}}


def test_rows_by_source_and_a_total():
    rows = data_rows(CHAT, SYNTH, REGENERATE, Counter({"gsm8k": 6, "synth": 4}), overlap=0)
    by_source = {row["source"]: row for row in rows}
    assert list(by_source) == ["gsm8k", "synth", "total"]
    assert by_source["synth"]["synthesized"] is True and by_source["synth"]["question_share"] == 0.4
    assert by_source["synth"]["offered"] == 8  # written minus the form checks' drops: what its selector saw
    synth = by_source["synth"]
    assert (synth["duplicates_exact"], synth["duplicates_near"], synth["dropped_benchmark_8gram"]) == (1, 2, 1)
    assert synth["offered"] - synth["duplicates_exact"] - synth["duplicates_near"] - synth["dropped_benchmark_8gram"] \
        == synth["questions"]
    total = by_source["total"]
    assert (total["questions"], total["answer_tokens"], total["filtered_form"]) == (10, 800, 4)
    assert total["overlap_check"] == "pass" and by_source["gsm8k"]["answer_token_share"] == 0.75
    assert data_rows(CHAT, SYNTH, REGENERATE, Counter({"gsm8k": 6, "synth": 4}), overlap=2)[-1]["overlap_check"] == \
        "FAIL"
    assert {row["reason"]: row["questions"] for row in filter_rows(SYNTH)} == {
        "unfinished": 3, "language": 1, "selector:duplicate_near": 2, "selector:benchmark_8gram": 1, "kept": 5}


def test_the_command_recounts_the_overlap_from_the_question_files(tmp_path):
    benchmark = tmp_path / "bench.jsonl"
    benchmark.write_text(json.dumps({"question_id": 1, "category": "writing",
                                     "turns": ["one two three four five six seven eight nine"]}) + "\n")
    train = tmp_path / "chat-train.jsonl"
    train.write_text("\n".join(json.dumps({"question_id": f"{source}-{index}", "category": "x", "turns": [text]})
                               for index, (source, text) in enumerate([
                                   ("gsm8k", "How many cows?"), ("synth", "zero one two three four five six seven eight"),
                                   ("synth", "What is sleep?")])) + "\n")
    for name, summary in (("chat", CHAT), ("synth", SYNTH), ("regen", REGENERATE)):
        (tmp_path / f"{name}.json").write_text(json.dumps(summary))
    assert main(["data-table", "--path", f"bench={benchmark}", "--benchmark", "bench", "--chat-summary",
                 str(tmp_path / "chat.json"), "--synth-summary", str(tmp_path / "synth.json"), "--regenerate-summary",
                 str(tmp_path / "regen.json"), "--questions", str(train), "--out-dir", str(tmp_path / "tables")]) == 0
    rows = list(csv.DictReader((tmp_path / "tables" / "data.csv").open()))
    assert list(rows[0]) == DATA_FIELDS
    assert rows[-1]["questions_sharing_benchmark_8gram"] == "1" and rows[-1]["overlap_check"] == "FAIL"
    assert {row["source"]: row["questions"] for row in rows} == {"gsm8k": "1", "synth": "2", "total": "3"}
    assert (tmp_path / "tables" / "data_filters.csv").is_file()
