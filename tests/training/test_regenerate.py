"""`python -m harness regenerate`: the target's own continuations (or a chat target's answers to chat questions) as a
token stream, the same for one seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import SamplingConfig, generate, wrap_model
from harness.cli import main
from harness.backend.models import eos_ids
from harness.data.prompts import Prompt, encode_turn, load_prompts
from harness.training import regenerate as regenerate_module
from harness.training.answer_shards import open_shards
from harness.training.regenerate import (
    RegenerateOptions,
    answer_shards,
    plan_chat_answers,
    regenerate,
    regenerate_chat,
)
from harness.data.token_streams import load_tokens, save_tokens
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from tests.helpers import build_tokenizer, make_llama, save_model_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model():
    return make_llama(vocab=50, hidden=32, layers=2, heads=4, seed=4, init_range=0.3)


def test_greedy_rows_are_the_targets_greedy_continuations(model):
    tokens = torch.randint(50, (400,), generator=torch.Generator().manual_seed(0))
    options = RegenerateOptions(sequences=5, prompt_len=6, new_tokens=9, greedy_share=0.4, batch_size=2, seed=3)
    stream = regenerate(model, tokens, options, progress=False)
    assert stream.shape == (5 * 15,)
    rows = stream.view(5, 15)
    target = wrap_model(model)
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    for row in rows[: options.greedy_sequences]:  # the first two: greedy
        assert row[6:].tolist() == generate(target, ar, row[None, :6], 9, SamplingConfig()).output_ids
    assert torch.equal(stream, regenerate(model, tokens, options, progress=False))  # one seed, one stream
    other = regenerate(model, tokens, RegenerateOptions(5, 6, 9, 0.4, 2, seed=4), progress=False)
    assert not torch.equal(stream, other)


def test_bad_options_are_one_line():
    with pytest.raises(DraftcountError, match="greedy_share must be in"):
        RegenerateOptions(greedy_share=1.5)
    with pytest.raises(DraftcountError, match=">= 1"):
        RegenerateOptions(new_tokens=0)


def test_the_command_writes_a_token_stream(tmp_path, model):
    model.save_pretrained(tmp_path / "target")
    save_tokens(tmp_path / "train.pt", torch.randint(50, (300,), generator=torch.Generator().manual_seed(1)))
    result = subprocess.run([sys.executable, "-m", "harness", "regenerate", "--target", str(tmp_path / "target"),
                             "--tokens", str(tmp_path / "train.pt"), "--out", str(tmp_path / "regen.pt"),
                             "--sequences", "3", "--prompt-len", "4", "--new-tokens", "5", "--no-progress"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert load_tokens(tmp_path / "regen.pt").shape == (27,) and '"greedy": 2' in result.stdout


CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<eos>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def chat_target():
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    model = make_llama(vocab=len(tokenizer), hidden=32, layers=2, heads=4, seed=5, init_range=0.3)
    return model, tokenizer


def test_chat_answers_in_padded_batches_are_the_targets_own_answers(chat_target):
    """Questions of different lengths in one left-padded batch: each greedy answer is what the engine's `ar` answers
    to that question alone (rendered with the chat template), cut after its first stop token."""
    model, tokenizer = chat_target
    questions = [Prompt(str(index), "test", (text,)) for index, text in enumerate(
        ["def add(a, b):", "The quick brown fox jumps over the lazy dog. The quick brown fox", "for i in range(10):"])]
    target = wrap_model(model, tokenizer)
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    alone = [generate(target, ar, torch.tensor([encode_turn(tokenizer, [], prompt.turns[0])]), 12,
                      SamplingConfig()).output_ids for prompt in questions]
    stop = alone[1][3]  # a token the second answer emits early: that row stops there, the others where theirs appear
    options = RegenerateOptions(new_tokens=12, greedy_share=1.0, batch_size=3, seed=0)
    stream, stats = regenerate_chat(model, tokenizer, questions, options, frozenset({stop}), progress=False)
    expected = []
    for prompt, answer in zip(questions, alone):
        cut = answer[:answer.index(stop) + 1] if stop in answer else answer
        expected += encode_turn(tokenizer, [], prompt.turns[0]) + cut
    assert stream.tolist() == expected
    assert stats["prompts"] == 3 and stats["greedy"] == 3 and stats["answer_tokens"] == len(expected) - sum(
        len(encode_turn(tokenizer, [], prompt.turns[0])) for prompt in questions)
    sampled = RegenerateOptions(new_tokens=12, greedy_share=0.0, batch_size=2, seed=0)
    first, _ = regenerate_chat(model, tokenizer, questions, sampled, frozenset({stop}), progress=False)
    again, _ = regenerate_chat(model, tokenizer, questions, sampled, frozenset({stop}), progress=False)
    assert torch.equal(first, again)  # one seed, one stream
    with pytest.raises(DraftcountError, match="no end-of-turn token"):
        regenerate_chat(model, tokenizer, questions, options, frozenset(), progress=False)


def test_the_command_answers_a_question_file(tmp_path, chat_target):
    model, tokenizer = chat_target
    save_model_dir(tmp_path / "target", model, tokenizer)
    questions = tmp_path / "chat-train.jsonl"
    questions.write_text("\n".join(json.dumps({"question_id": index, "category": "test", "turns": [text]})
                                   for index, text in enumerate(["def add(a, b):", "for i in range(3):"])) + "\n")
    assert main(["regenerate", "--target", str(tmp_path / "target"), "--prompts", str(questions), "--out",
                 str(tmp_path / "regen.pt"), "--new-tokens", "6", "--batch-size", "2", "--summary",
                 str(tmp_path / "regen.json"), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "regen.json").read_text())
    assert summary["prompts"] == 2 and summary["tokens"] == load_tokens(tmp_path / "regen.pt").numel()
    assert summary["answer_tokens"] <= 12 and summary["seconds"] >= 0
    by_source = summary["answer_tokens_by_source"]  # ids without a source prefix: each its own
    assert set(by_source) == {"0", "1"} and sum(by_source.values()) == summary["answer_tokens"]
    assert not (tmp_path / "regen.pt.shards").exists()  # the shards go once the stream is written
    assert main(["regenerate", "--target", str(tmp_path / "target"), "--prompts", str(questions), "--out",
                 str(tmp_path / "workers.pt"), "--new-tokens", "6", "--batch-size", "1", "--shard-size", "1",
                 "--workers", "2", "--threads", "2", "--no-progress"]) == 0  # two processes, a shard each
    assert torch.equal(load_tokens(tmp_path / "workers.pt"), regenerate_chat(
        model, tokenizer, load_prompts(str(questions)), RegenerateOptions(new_tokens=6, batch_size=1, shard_size=1),
        eos_ids(wrap_model(model, tokenizer)), progress=False)[0])
    assert main(["regenerate", "--target", str(tmp_path / "target"), "--tokens", str(tmp_path / "regen.pt"),
                 "--out", str(tmp_path / "x.pt"), "--workers", "2"]) == 2  # one line: workers answer questions only


def test_workers_sharing_a_shard_folder_write_the_stream_one_process_writes(chat_target, tmp_path):
    """Two parts of the shards answered one after the other into one folder (as two workers do side by side): the
    stream then read from the folder is the uninterrupted run's, and no shard is answered twice."""
    model, tokenizer = chat_target
    texts = ["def add(a, b):", "for i in range(10):", "The quick brown fox", "print(i * i)", "return a + b"]
    questions = [Prompt(str(index), "test", (text,)) for index, text in enumerate(texts)]
    options = RegenerateOptions(new_tokens=6, greedy_share=0.4, batch_size=1, seed=2, shard_size=1)
    stop = frozenset({tokenizer.eos_token_id})
    whole, _ = regenerate_chat(model, tokenizer, questions, options, stop, progress=False)
    plan = plan_chat_answers(model, tokenizer, questions, options, stop)
    shards = tmp_path / "shards"
    for part in range(2):
        answered, _ = answer_shards(model, plan, options, open_shards(shards, plan.key), shards, (part, 2),
                                    progress=False)
        assert len(answered) == len(texts) if part else len(answered) == 3  # shards 0, 2, 4 first
    stream, stats = regenerate_chat(model, tokenizer, questions, options, stop, progress=False, shard_dir=shards)
    assert torch.equal(stream, whole) and stats["shards_resumed"] == 5 and stats["answer_tokens_written"] == 0
    with pytest.raises(DraftcountError, match="part 2 of 2"):
        answer_shards(model, plan, options, {}, None, (2, 2), progress=False)


def test_a_killed_generation_keeps_its_finished_shards_and_continues_to_the_same_stream(chat_target, tmp_path,
                                                                                        monkeypatch):
    """Ten questions, half greedy, half sampled, in batches of 2 and shards of two batches: shards [2, 2] and [1]
    greedy, [2, 2] and [1] sampled. A run killed in the third shard's second batch leaves two shards on disk; the rerun
    answers only the two shards left (three batches) and writes the stream an uninterrupted run writes."""
    model, tokenizer = chat_target
    texts = ["def add(a, b):", "for i in range(10):", "The quick brown fox", "Speculative decoding drafts tokens",
             "print(i * i)", "return a + b", "The lazy dog", "the target verifies them", "def f(x):", "jumps over"]
    questions = [Prompt(str(index), "test", (text,)) for index, text in enumerate(texts)]
    options = RegenerateOptions(new_tokens=8, greedy_share=0.5, batch_size=2, seed=3, shard_size=4)
    stop = frozenset({tokenizer.eos_token_id, tokenizer.encode("e")[0]})
    whole, whole_stats = regenerate_chat(model, tokenizer, questions, options, stop, progress=False)
    assert whole_stats["shards"] == 4 and whole_stats["shards_resumed"] == 0
    calls = []
    real_answer_batch = regenerate_module.answer_batch

    def killed_in_third_shard(*args, **kwargs):
        calls.append(len(args[1]))
        if len(calls) == 5:  # the third shard's second batch
            raise KeyboardInterrupt
        return real_answer_batch(*args, **kwargs)

    monkeypatch.setattr(regenerate_module, "answer_batch", killed_in_third_shard)
    shards = tmp_path / "regenerated.pt.shards"
    with pytest.raises(KeyboardInterrupt):
        regenerate_chat(model, tokenizer, questions, options, stop, progress=False, shard_dir=shards)
    assert sorted(path.name for path in shards.glob("shard-*.json")) == ["shard-00000.json", "shard-00001.json"]
    assert not list(shards.glob("*.partial"))
    counted = []
    monkeypatch.setattr(regenerate_module, "answer_batch", lambda *args, **kwargs: counted.append(1) or
                        real_answer_batch(*args, **kwargs))
    resumed, stats = regenerate_chat(model, tokenizer, questions, options, stop, progress=False, shard_dir=shards)
    assert torch.equal(resumed, whole) and stats["answer_tokens"] == whole_stats["answer_tokens"]
    assert stats["shards_resumed"] == 2 and len(counted) == 3  # only the two shards left: three batches
    assert stats["answer_tokens_written"] < whole_stats["answer_tokens_written"]


def test_shards_of_another_run_are_not_reused(chat_target, tmp_path):
    model, tokenizer = chat_target
    questions = [Prompt(str(index), "test", (text,)) for index, text in enumerate(["def add(a, b):", "for i in"])]
    stop = frozenset({tokenizer.eos_token_id})
    shards = tmp_path / "shards"
    first, _ = regenerate_chat(model, tokenizer, questions, RegenerateOptions(new_tokens=4, batch_size=1, shard_size=1),
                               stop, progress=False, shard_dir=shards)
    longer = RegenerateOptions(new_tokens=6, batch_size=1, shard_size=1)
    stream, stats = regenerate_chat(model, tokenizer, questions, longer, stop, progress=False, shard_dir=shards)
    assert stats["shards_resumed"] == 0 and torch.equal(stream, regenerate_chat(model, tokenizer, questions, longer,
                                                                                stop, progress=False)[0])
    assert stream.numel() == first.numel() + 4  # two answers, each 2 tokens longer (no stop token in these)
