"""Every input of a run checked before any model loads (issue 78, item 1): one line naming the input and the rule,
exit status 2, no traceback. The target named here does not exist, so a check that ran only after loading would
fail these tests with "does not exist" instead of its own line. docs/methods.md's bad-input table lists the cases."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.data.prompts import load_prompts
from harness.errors import DraftcountError

MISSING_TARGET = "/nonexistent/draftcount-target"


def _prompt_file(tmp_path: Path, case: str) -> Path:
    files = {
        "not_utf8": ("p.txt", b"hello\nd\xe9j\xe0 vu\n"),
        "turns_string": ("p.jsonl", b'{"turns": "just a string"}\n'),
        "turns_empty": ("p.jsonl", b'{"turns": []}\n'),
        "turn_blank": ("p.jsonl", b'{"turns": ["fine", "  "]}\n'),
        "turn_number": ("p.jsonl", b'{"turns": [3]}\n'),
        "not_object": ("p.jsonl", b'["a list"]\n'),
        "jsonl_not_utf8": ("p.jsonl", b'{"turns": ["caf\xe9"]}\n'),
        "good": ("p.txt", b"hello world\n"),
    }
    name, data = files[case]
    path = tmp_path / name
    path.write_bytes(data)
    return path


CASES = {  # case: (prompt file, extra arguments, what the line says)
    "temperature_nan": ("good", ["--temperature", "nan"], "temperature must be a finite number >= 0, got nan"),
    "temperature_inf": ("good", ["--temperature", "inf"], "temperature must be a finite number >= 0, got inf"),
    "temperature_negative": ("good", ["--temperature", "-1"], "temperature must be a finite number >= 0"),
    "top_p_nan": ("good", ["--top-p", "nan"], "top_p must be in (0, 1], got nan"),
    "top_p_zero": ("good", ["--top-p", "0"], "top_p must be in (0, 1]"),
    "top_k_negative": ("good", ["--top-k", "-2"], "top_k must be a whole number >= 0, got -2"),
    "max_new_tokens_zero": ("good", ["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    "limit_zero": ("good", ["--limit", "0"], "--limit must be >= 1, got 0"),
    "seed_negative": ("good", ["--seed", "-1"], "--seed must be >= 0, got -1"),
    "threads_zero": ("good", ["--threads", "0"], "--threads must be >= 1, got 0"),
    "samples_zero": ("good", ["--samples", "0"], "--samples must be >= 1, got 0"),
    "repeats_zero": ("good", ["--repeats", "0"], "--repeats must be >= 1, got 0"),
    "warmup_negative": ("good", ["--warmup", "-1"], "--warmup must be >= 0, got -1"),
    "not_utf8": ("not_utf8", [], "p.txt: not UTF-8 at byte 7 (line 2"),
    "jsonl_not_utf8": ("jsonl_not_utf8", [], "p.jsonl: not UTF-8 at byte 15 (line 1"),
    "turns_string": ("turns_string", [], "p.jsonl:1: 'turns' must be a non-empty list of strings, got str"),
    "turns_empty": ("turns_empty", [], "p.jsonl:1: 'turns' must be a non-empty list of strings, got list"),
    "turn_blank": ("turn_blank", [], "p.jsonl:1: turn 2 must be a non-empty string"),
    "turn_number": ("turn_number", [], "p.jsonl:1: turn 1 must be a non-empty string, got 3"),
    "not_object": ("not_object", [], "p.jsonl:1: a record must be a JSON object, got list"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_run_input_is_one_line_before_any_model_loads(tmp_path, capsys, case):
    prompts, extra, says = CASES[case]
    args = ["run", "--method", "ar", "--target", MISSING_TARGET, "--prompts", str(_prompt_file(tmp_path, prompts)),
            "--out", str(tmp_path / "o.jsonl"), "--no-progress", *extra]
    assert main(args) == 2
    stderr = capsys.readouterr().err
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_one_case_through_the_command_line_itself(tmp_path):
    """``python -m harness run --temperature nan``: exit status 2 and one line on stderr, in a fresh process."""
    result = subprocess.run([sys.executable, "-m", "harness", "run", "--method", "ar", "--target", MISSING_TARGET,
                             "--prompts", str(_prompt_file(tmp_path, "good")), "--out", str(tmp_path / "o.jsonl"),
                             "--temperature", "nan"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: temperature must be a finite number >= 0, got nan"]


def test_good_turns_load_unchanged(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question_id": 7, "category": "c", "turns": ["one", "two"]}) + "\n")
    (prompt,) = load_prompts(str(path))
    assert prompt.turns == ("one", "two") and prompt.id == "7"


def test_a_byte_offset_past_the_first_line_counts_lines(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(b"a\nb\nc\xff\n")
    with pytest.raises(DraftcountError, match=r"not UTF-8 at byte 5 \(line 3: .*byte 0xff\)"):
        load_prompts(str(path))
