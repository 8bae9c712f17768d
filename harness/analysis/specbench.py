"""Export runs in Spec-Bench's answer-file layout, so its own ``evaluation/speed.py`` reads them.

Spec-Bench writes one JSON line per question:
``{question_id, category, answer_id, model_id, tstamp, choices: [{index, turns, decoding_steps,
new_tokens, wall_time, accept_lengths}]}`` with one entry per turn in the lists (``accept_lengths``
is one flat list over the turns). Each of our records files becomes two answer files: the method's
(``<variant>.jsonl``) and the paired ``ar`` baseline's from the same process (``<variant>.ar.jsonl``):

    python evaluation/speed.py --file-path <out>/<run>/model_answer/eagle.jsonl \\
        --base-path <out>/<run>/model_answer/eagle.ar.jsonl --tokenizer-path <target model dir>

(speed.py recounts the baseline's tokens with the tokenizer and subtracts one per turn for a BOS token.)
"""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path
from typing import Any

from harness.store.atomic import atomic_path
from harness.errors import DraftcountError
from harness.store.records import read_records


def _question_id(prompt_id: str) -> int | str:
    return int(prompt_id) if prompt_id.isdigit() else prompt_id


def _timestamp(created: str | None) -> float:
    if not created:
        return 0.0
    return float(calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%S%z")))


def answer_line(turns: list[dict[str, Any]], model_id: str) -> dict[str, Any]:
    """One Spec-Bench answer from the records of one prompt's turns (in turn order)."""
    first = turns[0]
    steps = [record["counters"].get("step_tokens") or [] for record in turns]
    return {
        "question_id": _question_id(first["prompt_id"]),
        "category": first.get("category") or first["dataset"],
        "answer_id": f"{model_id}:{first['pair_id']}",
        "model_id": model_id,
        "tstamp": _timestamp(first.get("created")),
        "choices": [{
            "index": 0,
            "turns": [record["output_text"] for record in turns],
            "decoding_steps": [len(step) for step in steps],
            "new_tokens": [record["counters"]["new_tokens"] for record in turns],
            "wall_time": [record["counters"]["wall_seconds"] for record in turns],
            "accept_lengths": [count for step in steps for count in step],
        }],
    }


def answers_by_role(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Answer lines per role ('method', 'baseline'), one per prompt, sorted by question id like Spec-Bench."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        grouped.setdefault((record["role"], record["prompt_id"]), []).append(record)
    answers: dict[str, list[dict[str, Any]]] = {}
    for (role, _), turns in grouped.items():
        turns.sort(key=lambda record: record.get("turn", 0))
        model_id = turns[0].get("variant", turns[0]["method"]) if role == "method" else "ar"
        answers.setdefault(role, []).append(answer_line(turns, model_id))
    for lines in answers.values():
        lines.sort(key=lambda line: (isinstance(line["question_id"], str), line["question_id"]))
    return answers


def export_records(records_path: Path, out_dir: Path) -> list[Path]:
    """Write ``out_dir/<run>/model_answer/<variant>.jsonl`` (and ``<variant>.ar.jsonl`` for the paired
    baseline) for one records file; ``<run>`` is the records file's name (dataset and temperature)."""
    records = read_records(records_path)
    if not records:
        raise DraftcountError(f"{records_path} holds no records")
    variant = records[0].get("variant", records[0]["method"])
    folder = out_dir / Path(records_path).stem / "model_answer"
    written = []
    for role, lines in answers_by_role(records).items():
        path = folder / (f"{variant}.jsonl" if role == "method" else f"{variant}.ar.jsonl")
        with atomic_path(path) as partial:
            partial.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        written.append(path)
    return written
