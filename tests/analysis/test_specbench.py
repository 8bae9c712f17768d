"""The Spec-Bench export and its reader: accept lengths in EAGLE's convention, and speed.py's numbers equal to the
summary's (tau, speedup_specbench) on a real small run."""

import json
import os
import sys

import pytest

from harness.analysis.specbench import accept_lengths, export_records, read_answers, speed_report
from harness.analysis.summary import records_frame, summarize
from harness.cli import main
from tests.analysis.test_report import make_record


def test_accept_lengths_by_hand():
    """EAGLE's loop (Spec-Bench's inference_eagle.py) on the same token sequence: the prefill produces t0; step i
    verifies drafts behind its root and appends root + accepted drafts; the bonus of the last forward would be
    the root of a step that never runs. Ours emit that bonus too: it is in new_tokens, in no entry."""
    # prefill t0; steps accept 3, 0, 2 drafts, each adds a bonus: 1 + 4 + 1 + 3 = 9 new tokens
    assert accept_lengths([3, 0, 2], 9) == [4, 1, 3]  # EAGLE: [t0 d d d] [b1] [b2 d d], b3 unemitted
    # EOS at the second draft of the last step: 8 new tokens; EAGLE trims the last entry past EOS -> [b2 d EOS]
    assert accept_lengths([3, 0, 2], 8) == [4, 1, 3]
    # EOS (or max_new_tokens) at the last step's first draft: 7 new tokens -> [b2 EOS]
    assert accept_lengths([3, 0, 2], 7) == [4, 1, 2]
    assert accept_lengths([0] * 7, 8) == [1] * 7  # ar: one token per step, the prefill's in none
    assert accept_lengths([], 1) == []  # a turn that ended on the prefill's token has no decoding step


def test_tau_is_the_mean_accepted_length_per_decoding_step(tmp_path):
    """tau: accepted + 1 per verification step, the prefill no step, the last step cut at the turn's end; the
    mean of the exported accept lengths."""
    records = [make_record("sd", "sd", "method", "p1", 0.0, 9, 0.5, [3, 0, 2]),  # untrimmed: 8 counted in 3 steps
               make_record("sd", "sd", "method", "p2", 0.0, 7, 0.5, [3, 0, 2]),  # cut at 7 new tokens: 7 in 3
               make_record("ar", "ar", "baseline", "p1", 0.0, 9, 1.0, [0] * 8),
               make_record("ar", "ar", "baseline", "p2", 0.0, 7, 1.0, [0] * 6)]
    path = tmp_path / "code-t0.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    row = summarize(records_frame([path])).set_index("variant").loc["sd"]
    assert row.tau == pytest.approx((8 + 7) / 6)
    assert row.accepted_per_step == pytest.approx(10 / 6)  # the same steps, no root: tau - 1 but for the cut
    assert row.tokens_per_forward == pytest.approx((9 + 7) / 8)  # the other convention: prefill forward counted
    method, baseline = export_records(path, tmp_path / "specbench")
    assert [line["choices"][0]["accept_lengths"] for line in read_answers(method)] == [[4, 1, 3], [4, 1, 2]]
    report = speed_report(method, baseline)
    assert report["mean_accepted_tokens"] == pytest.approx(row.tau)
    assert report["speedup"] == pytest.approx(row.speedup_specbench)
    assert report["speedup"] == pytest.approx(((9 / 0.5 + 7 / 0.5) / 2) / ((9 / 1.0 + 7 / 1.0) / 2))


def test_samples_are_choices_and_speed_py_reads_the_first(tmp_path):
    records = [make_record("stand", "stand", "method", "p1", 1.0, 5 + sample, 0.5, [1 + sample, 1], sample=sample)
               for sample in range(2)]
    records += [make_record("ar", "ar", "baseline", "p1", 1.0, 5, 1.0, [0] * 4, sample=sample) for sample in range(2)]
    path = tmp_path / "code-t1.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    method, baseline = export_records(path, tmp_path / "specbench")
    (line,) = read_answers(method)
    assert [choice["index"] for choice in line["choices"]] == [0, 1]
    assert [choice["new_tokens"] for choice in line["choices"]] == [[5], [6]]
    assert speed_report(method, baseline)["mean_accepted_tokens"] == pytest.approx(2.0)  # sample 0's [2, 2]
    row = summarize(records_frame([path])).set_index("variant").loc["stand"]
    assert row.speedup_specbench == pytest.approx((5 / 0.5) / (5 / 1.0))  # sample 0, as speed.py


@pytest.fixture(scope="module")
def smoke_run(model_dirs, tmp_path_factory):
    """sd paired with ar on two two-turn questions (a real run of the tiny models), exported for Spec-Bench."""
    from harness.runner import RunConfig, run

    folder = tmp_path_factory.mktemp("specbench")
    questions = folder / "question.jsonl"
    questions.write_text("".join(json.dumps(line) + "\n" for line in (
        {"question_id": 1, "category": "coding", "turns": ["def add(a, b):", "Now subtract."]},
        {"question_id": 2, "category": "writing", "turns": ["Write a poem about code.", "Shorter, please."]},
    )))
    records = folder / "raw" / "sd" / "mini-t0.jsonl"
    run(RunConfig(method="sd", target=str(model_dirs["target"]), draft=str(model_dirs["draft"]),
                  prompts=str(questions), dataset="mini", out=records, method_options={"gamma": 3},
                  max_new_tokens=24, pair_with_ar=True), progress=False)
    return records, export_records(records, folder / "specbench")


def test_speed_py_on_a_smoke_run_gives_the_summarys_numbers(smoke_run, model_dirs):
    records_path, (method, baseline) = smoke_run
    row = summarize(records_frame([records_path])).set_index("variant").loc["sd"]
    # speed.py's computation with the recorded baseline tokens: the summary's tau and speedup_specbench, exactly
    report = speed_report(method, baseline)
    assert report["answers"] == 2
    assert report["mean_accepted_tokens"] == pytest.approx(row.tau, rel=1e-12)
    assert report["speedup"] == pytest.approx(row.speedup_specbench, rel=1e-12)
    assert report["mean_accepted_tokens"] > 1  # the draft is a perturbed copy: some drafts are accepted
    # the export's per-turn counts are the records': steps = verification steps; the entries sum to the new
    # tokens less the last forward's bonus (which EAGLE never emits), unless the turn stopped inside its last step
    records = [json.loads(line) for line in records_path.read_text().splitlines()]
    by_turn = {(r["prompt_id"], r["turn"]): r["counters"] for r in records if r["role"] == "method"}
    for line in read_answers(method):
        choice, turns = line["choices"][0], [by_turn[(str(line["question_id"]), t)] for t in range(2)]
        assert choice["decoding_steps"] == [len(c["step_accepted"]) for c in turns]
        assert choice["new_tokens"] == [c["new_tokens"] for c in turns]
        start = 0
        for counters, steps in zip(turns, choice["decoding_steps"]):
            lengths = choice["accept_lengths"][start:start + steps]
            start += steps
            untrimmed = sum(a + 1 for a in counters["step_accepted"])
            assert sum(lengths) == min(untrimmed, counters["new_tokens"])
            assert counters["new_tokens"] - sum(lengths) in (0, 1)
    assert start == len(choice["accept_lengths"])
    # the two acceptance conventions on the same turns: tau counts steps, tokens_per_forward also the prefill
    assert row.tau != row.tokens_per_forward
    # speed.py counts the baseline's tokens again from its text, len(tokenizer(turn).input_ids) - 1 per turn: the
    # same method numbers, the baseline's from that count (random weights emit invalid UTF-8 that decodes to
    # U+FFFD, so here that count is far from the tokens generated: why our reader defaults to the recorded ones)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dirs["target"]))
    recounted = speed_report(method, baseline, tokenizer=str(model_dirs["target"]))
    assert recounted["mean_accepted_tokens"] == report["mean_accepted_tokens"]
    assert recounted["tokens_per_second"] == report["tokens_per_second"]
    speeds = [sum(len(tokenizer(text).input_ids) - 1 for text in line["choices"][0]["turns"])
              / sum(line["choices"][0]["wall_time"]) for line in read_answers(baseline)]
    assert recounted["tokens_per_second_baseline"] == pytest.approx(sum(speeds) / len(speeds))
    assert recounted["speedup"] == pytest.approx(report["tokens_per_second"] / (sum(speeds) / len(speeds)))


def test_speed_pys_recount_of_the_baseline_on_text_that_round_trips(tmp_path, tokenizer):
    """Where the baseline's text encodes back to its tokens, speed.py's count is new_tokens - 1 per turn with a
    tokenizer that adds no BOS token (this one; Llama's and Vicuna's add one, and the count is exact), and one
    less again for a turn that ended on EOS (the text leaves special tokens out)."""
    text = "def add(a, b):\n    return a + b\n"
    tokens = len(tokenizer(text).input_ids)
    records = [make_record("sd", "sd", "method", "p1", 0.0, 12, 0.5, [3, 2, 4]),
               {**make_record("ar", "ar", "baseline", "p1", 0.0, tokens, 1.0, [0] * (tokens - 1)),
                "output_text": text}]
    path = tmp_path / "code-t0.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    method, baseline = export_records(path, tmp_path / "specbench")
    recorded, recounted = speed_report(method, baseline), speed_report(method, baseline, tokenizer=tokenizer)
    assert recorded["tokens_per_second_baseline"] == pytest.approx(tokens / 1.0)
    assert recounted["tokens_per_second_baseline"] == pytest.approx((tokens - 1) / 1.0)
    assert recounted["speedup"] == pytest.approx(recorded["speedup"] * tokens / (tokens - 1))

def test_the_specbench_speed_command(smoke_run, capsys):
    records_path, (method, baseline) = smoke_run
    assert main(["specbench-speed", "--file-path", str(method)]) == 0  # the baseline found beside it
    out = capsys.readouterr().out
    report = speed_report(method, baseline)
    assert f"#Mean accepted tokens: {report['mean_accepted_tokens']}" in out
    assert f"Speedup ratio: {report['speedup']}" in out
    assert main(["specbench-speed", "--file-path", str(method), "--task", "coding"]) == 0
    assert "Task: coding (1 answers" in capsys.readouterr().out
    assert main(["specbench-speed", "--file-path", str(method), "--task", "rag"]) == 2
    assert "no answers of task 'rag'" in capsys.readouterr().err
    assert main(["specbench-speed", "--file-path", str(method.with_name("nope.jsonl"))]) == 2
    assert "no answer file" in capsys.readouterr().err


@pytest.mark.skipif(not os.environ.get("SPEC_BENCH_DIR"), reason="SPEC_BENCH_DIR (a Spec-Bench checkout) not set")
def test_upstream_speed_py_reads_the_export(smoke_run, model_dirs, monkeypatch):
    """Spec-Bench's own evaluation/speed.py, imported from a checkout, on the export: the same four numbers."""
    monkeypatch.syspath_prepend(os.environ["SPEC_BENCH_DIR"])
    sys.modules.pop("evaluation", None)
    from evaluation.speed import speed

    records_path, (method, baseline) = smoke_run
    tokens_per_second, baseline_tokens_per_second, speedup, lengths = speed(
        str(method), str(baseline), str(model_dirs["target"]), task="overall", report=False)
    ours = speed_report(method, baseline, tokenizer=str(model_dirs["target"]))
    assert tokens_per_second == pytest.approx(ours["tokens_per_second"], rel=1e-12)
    assert baseline_tokens_per_second == pytest.approx(ours["tokens_per_second_baseline"], rel=1e-12)
    assert speedup == pytest.approx(ours["speedup"], rel=1e-12)
    assert sum(lengths) / len(lengths) == pytest.approx(ours["mean_accepted_tokens"], rel=1e-12)
    row = summarize(records_frame([records_path])).set_index("variant").loc["sd"]
    assert sum(lengths) / len(lengths) == pytest.approx(row.tau, rel=1e-12)  # the summary's tau
    # its speedup is the summary's speedup_specbench but for the baseline's token count (recorded vs from text)
    recorded = speed_report(method, baseline)["tokens_per_second_baseline"]
    assert speedup == pytest.approx(row.speedup_specbench * recorded / baseline_tokens_per_second, rel=1e-12)

