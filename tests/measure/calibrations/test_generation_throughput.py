"""`python -m harness measure generation-throughput`: answer tokens per second of a chat target per batch size, on the
same questions with the code the workflow runs."""

from __future__ import annotations

import csv
import json

import pytest

from harness.errors import DraftcountError
from harness.measure.calibrations.generation_throughput import FIELDS, main, parse_batch_sizes
from tests.helpers import build_tokenizer, make_llama, save_model_dir

CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<eos>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def test_every_batch_size_answers_the_same_questions(tmp_path):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    save_model_dir(tmp_path / "target", make_llama(vocab=len(tokenizer), seed=3, init_range=0.3), tokenizer)
    questions = tmp_path / "chat-train.jsonl"
    questions.write_text("\n".join(json.dumps({"question_id": index, "category": "test", "turns": [text]}) for index, text
                                   in enumerate(["def add(a, b):", "for i in range(3):", "The quick fox", "jumps"])))
    out = tmp_path / "throughput.csv"
    assert main(["--target", str(tmp_path / "target"), "--prompts", str(questions), "--limit", "4", "--batch-sizes",
                 "1,4", "--new-tokens", "5", "--greedy-share", "1", "--threads", "1", "--no-progress", "--out",
                 str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [row["batch_size"] for row in rows] == ["1", "4"] and list(rows[0]) == FIELDS
    assert {row["answer_tokens"] for row in rows} == {"20"}  # greedy, no stop token: 4 answers of 5 tokens each
    assert all(float(row["answer_tokens_per_cpu_s"]) > 0 and row["threads"] == "1" for row in rows)
    with pytest.raises(DraftcountError, match="holds 4 questions, --limit 5"):
        main(["--target", str(tmp_path / "target"), "--prompts", str(questions), "--limit", "5", "--out", str(out)])


def test_batch_sizes_are_whole_numbers():
    assert parse_batch_sizes("8,16, 32") == [8, 16, 32]
    for text in ("", "8,x", "0,8"):
        with pytest.raises(DraftcountError, match="--batch-sizes"):
            parse_batch_sizes(text)
