"""Export runs in Spec-Bench's answer-file layout, and read them back the way its ``evaluation/speed.py`` does.

Spec-Bench (github.com/hemingkx/Spec-Bench, ``evaluation/eval.py``) writes one JSON line per question:
``{question_id, category, answer_id, model_id, tstamp, choices: [{index, turns, decoding_steps, new_tokens,
wall_time, accept_lengths}]}``, with one entry per turn in ``turns``, ``decoding_steps``, ``new_tokens`` and
``wall_time``, and ``accept_lengths`` one flat list over the turns' decoding steps. Each of our records files
becomes two answer files: the method's (``<variant>.jsonl``) and the paired ``ar`` baseline's from the same
process (``<variant>.ar.jsonl``). A run with ``--samples N`` writes sample ``i`` as ``choices[i]`` (Spec-Bench's
``--num-choices``); speed.py reads ``choices[0]`` only.

Accept lengths follow EAGLE's generation loop as Spec-Bench runs it (``evaluation/inference_eagle.py``,
``ea_forward``; ``model/eagle/utils.py``, ``update_inference_inputs``): one entry per decoding step
(verification forward), none for the prefill, each the tokens the step appends, the step's root (the token
the previous forward produced; the prefill's for the first step) and its accepted drafts, so ``accepted + 1``;
the turn's last entry is cut where the output ends (at EOS, as ``ea_forward`` trims ``accept_length_list[-1]``;
here also at ``max_new_tokens``). The bonus token of a turn's last forward would be the next step's root: EAGLE
never emits it, we do, so it is in ``new_tokens`` but in no entry (``sum(accept_lengths) == new_tokens - 1`` for
a turn that did not stop inside its last step). The mean of the entries is the summary's ``tau``.

Reading (``speed_report``, ``python -m harness specbench-speed``) follows speed.py's ``speed()``: per answer line
tokens/s = sum(new_tokens) / sum(wall_time); the speedup is the mean of the method's per-question tokens/s over
the mean of the baseline's (a ratio of arithmetic means of per-prompt throughputs: the summary's
``speedup_specbench``, not its paired geometric mean); mean accepted tokens is the mean of all accept lengths.
speed.py counts the baseline's tokens again from its text, ``len(tokenizer(turn).input_ids) - 1`` per turn
(one BOS token off); ``speed_report`` does so when given a tokenizer, and reads the recorded ``new_tokens`` without
one. Upstream, ``python evaluation/speed.py`` ignores its path flags (``--mean-report`` is on whatever one
passes), so call its function from a Spec-Bench checkout:

    python -c "from evaluation.speed import speed; speed('<out>/<run>/model_answer/eagle.jsonl', \\
        '<out>/<run>/model_answer/eagle.ar.jsonl', '<target model dir>', task='overall')"
"""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path
from typing import Any, Callable

from harness.store.atomic import atomic_path
from harness.errors import DraftcountError
from harness.store.records import read_records

# speed.py's task "mt_bench" keeps these categories; "overall" keeps every line; another task, its category
MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def accept_lengths(step_accepted: list[int], new_tokens: int) -> list[int]:
    """One turn's Spec-Bench accept lengths: per verification step ``accepted + 1`` (the step's root and its
    accepted drafts, no prefill entry), cut so that the running total stops at the turn's emitted tokens
    (the last step's tokens past EOS or ``max_new_tokens`` are not counted)."""
    lengths, counted = [], 0
    for accepted in step_accepted:
        step = min(accepted + 1, max(new_tokens - counted, 0))
        lengths.append(step)
        counted += step
    return lengths


def _question_id(prompt_id: str) -> int | str:
    return int(prompt_id) if prompt_id.isdigit() else prompt_id


def _timestamp(created: str | None) -> float:
    if not created:
        return 0.0
    return float(calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%S%z")))


def _choice(index: int, turns: list[dict[str, Any]]) -> dict[str, Any]:
    lengths = [accept_lengths(record["counters"].get("step_accepted") or [], record["counters"]["new_tokens"])
               for record in turns]
    return {
        "index": index,
        "turns": [record["output_text"] for record in turns],
        "decoding_steps": [len(steps) for steps in lengths],
        "new_tokens": [record["counters"]["new_tokens"] for record in turns],
        "wall_time": [record["counters"]["wall_seconds"] for record in turns],
        "accept_lengths": [count for steps in lengths for count in steps],
    }


def answer_line(turns: list[dict[str, Any]], model_id: str) -> dict[str, Any]:
    """One Spec-Bench answer from the records of one prompt's turns (every sample: one choice per sample index)."""
    by_sample: dict[int, list[dict[str, Any]]] = {}
    for record in turns:
        by_sample.setdefault(int(record.get("sample", 0)), []).append(record)
    first = min(turns, key=lambda record: (record.get("sample", 0), record.get("turn", 0)))
    return {
        "question_id": _question_id(first["prompt_id"]),
        "category": first.get("category") or first["dataset"],
        "answer_id": f"{model_id}:{first['pair_id']}",
        "model_id": model_id,
        "tstamp": _timestamp(first.get("created")),
        "choices": [_choice(sample, sorted(records, key=lambda record: record.get("turn", 0)))
                    for sample, records in sorted(by_sample.items())],
    }


def answers_by_role(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Answer lines per role ('method', 'baseline'), one per prompt, sorted by question id like Spec-Bench."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        grouped.setdefault((record["role"], record["prompt_id"]), []).append(record)
    answers: dict[str, list[dict[str, Any]]] = {}
    for (role, _), turns in grouped.items():
        model_id = turns[0].get("variant", turns[0]["method"]) if role == "method" else "ar"
        answers.setdefault(role, []).append(answer_line(turns, model_id))
    for lines in answers.values():
        lines.sort(key=lambda line: (isinstance(line["question_id"], str), line["question_id"]))
    return answers


def export_records(records_path: Path, out_dir: Path) -> list[Path]:
    """Write ``out_dir/<run>/model_answer/<variant>.jsonl`` (and ``<variant>.ar.jsonl`` for the paired
    baseline) for one records file; ``<run>`` is the records file's name (dataset and temperature). A run with
    ``--repeats N`` writes its first run there and run r (1-based r > 1) as ``<variant>.run<r>.jsonl`` (and
    ``.run<r>.ar.jsonl``), each a complete answer file of its own."""
    records = read_records(records_path)
    if not records:
        raise DraftcountError(f"{records_path} holds no records")
    variant = records[0].get("variant", records[0]["method"])
    folder = out_dir / Path(records_path).stem / "model_answer"
    runs: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        runs.setdefault(int(record.get("repeat", 0)), []).append(record)
    written = []
    for repeat, run_records in sorted(runs.items()):
        stem = variant if repeat == 0 else f"{variant}.run{repeat + 1}"
        for role, lines in answers_by_role(run_records).items():
            path = folder / (f"{stem}.jsonl" if role == "method" else f"{stem}.ar.jsonl")
            with atomic_path(path) as partial:
                partial.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
            written.append(path)
    return written


def read_answers(path: Path, task: str = "overall") -> list[dict[str, Any]]:
    """The answer lines of ``path`` that speed.py keeps for ``task`` ('overall': all; 'mt_bench': MT-Bench's
    categories; anything else: that category)."""
    path = Path(path)
    if not path.is_file():
        raise DraftcountError(f"no answer file {path}")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if task == "overall":
        return lines
    if task == "mt_bench":
        return [line for line in lines if line["category"] in MT_BENCH_CATEGORIES]
    return [line for line in lines if line["category"] == task]


def _token_counter(tokenizer: Any) -> Callable[[str], int]:
    """speed.py's count of a baseline turn's tokens: its text tokenized again, less one (a BOS token)."""
    if isinstance(tokenizer, (str, Path)):
        from transformers import AutoTokenizer  # only here: the analysis modules import without transformers

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    return lambda text: len(tokenizer(text).input_ids) - 1


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def speed_report(method_file: Path, baseline_file: Path, tokenizer: Any = None,
                 task: str = "overall") -> dict[str, float]:
    """What Spec-Bench's ``evaluation/speed.py`` (``speed()``) computes from two answer files, in our own code:
    ``tokens_per_second`` (mean over the method's questions of sum(new_tokens) / sum(wall_time) of their first
    choice), ``tokens_per_second_baseline`` (the same for the baseline), ``speedup`` (their ratio),
    ``mean_accepted_tokens`` (mean of every accept length of the method's first choices) and ``answers``.
    With ``tokenizer`` (a path or a tokenizer object) the baseline's tokens are counted from its text as speed.py
    counts them; without, its recorded ``new_tokens`` are read (what our summary uses)."""
    method, baseline = read_answers(method_file, task), read_answers(baseline_file, task)
    if not method or not baseline:
        raise DraftcountError(f"no answers of task {task!r} in {method_file if not method else baseline_file}")
    speeds, lengths = [], []
    for line in method:
        choice = line["choices"][0]
        speeds.append(sum(choice["new_tokens"]) / sum(choice["wall_time"]))
        lengths.extend(choice["accept_lengths"])
    count = _token_counter(tokenizer) if tokenizer is not None else None
    baseline_speeds = []
    for line in baseline:
        choice = line["choices"][0]
        tokens = sum(count(text) for text in choice["turns"]) if count else sum(choice["new_tokens"])
        baseline_speeds.append(tokens / sum(choice["wall_time"]))
    tokens_per_second, baseline_tokens_per_second = _mean(speeds), _mean(baseline_speeds)
    return {
        "tokens_per_second": tokens_per_second, "tokens_per_second_baseline": baseline_tokens_per_second,
        "speedup": tokens_per_second / baseline_tokens_per_second, "mean_accepted_tokens": _mean(lengths),
        "answers": len(method),
    }
