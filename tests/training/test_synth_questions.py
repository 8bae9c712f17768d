"""`python -m harness synth-questions`: user turns a chat target writes through its chat template (Magpie), checked
for form, kept apart from the benchmark and deduplicated; one seed, one set of questions."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.data.prompts import load_prompts
from harness.data.question_filters import FormBounds, benchmark_selector, form_problem
from harness.errors import DraftcountError
from harness.training.synth_questions import (
    SynthOptions,
    synth_questions,
    template_strings,
    user_turn_prefix,
)
from tests.helpers import build_tokenizer, make_llama, save_model_dir

CHAT_TEMPLATE = ("{% if messages[0]['role'] != 'system' %}<|system|>Be helpful.<eos>{% endif %}"
                 "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<eos>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
LOOSE = FormBounds(min_words=1, max_words=40, min_ascii_letters=0.0)  # a random model's text: any script, short


@pytest.fixture(scope="module")
def chat_target():
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    model = make_llama(vocab=len(tokenizer), hidden=32, layers=2, heads=4, seed=7, init_range=0.3)
    return model, tokenizer


def frequent_stops(tokenizer) -> frozenset[int]:
    """Tokens a random model writes often: its questions end within a few tokens."""
    return frozenset(tokenizer.encode(" the a e o i t")) | {tokenizer.eos_token_id}


def test_the_prefix_is_the_template_up_to_a_user_turns_content(chat_target):
    _, tokenizer = chat_target
    assert tokenizer.decode(user_turn_prefix(tokenizer)) == "<|system|>Be helpful.<eos><|user|>"
    assert "<eos>" in template_strings(tokenizer)
    plain = build_tokenizer()
    with pytest.raises(DraftcountError, match="no chat template"):
        user_turn_prefix(plain)


def test_written_questions_are_well_formed_distinct_and_follow_the_seed(chat_target):
    model, tokenizer = chat_target
    options = SynthOptions(count=4, max_generated=24, max_tokens=6, temperature=1.0, top_p=0.9, batch_size=8, seed=1,
                           bounds=LOOSE)
    kept, stats = synth_questions(model, tokenizer, options, frequent_stops(tokenizer), benchmark_selector([], 0.5),
                                  progress=False)
    assert len(kept) == stats["kept"] >= 1 and stats["written"] <= 24
    assert stats["written"] == stats["kept"] + sum(stats["filtered"].values()) + sum(stats["dropped"].values())
    assert all(form_problem(text, True, template_strings(tokenizer), LOOSE) is None for text in kept)
    assert len({" ".join(text.lower().split()) for text in kept}) == len(kept)
    again, _ = synth_questions(model, tokenizer, options, frequent_stops(tokenizer), benchmark_selector([], 0.5),
                               progress=False)
    assert again == kept
    # the benchmark's turns are never written back: with the first run's questions as the benchmark, none is kept
    apart, apart_stats = synth_questions(model, tokenizer, options, frequent_stops(tokenizer),
                                         benchmark_selector(kept, 0.5), progress=False)
    assert not set(apart) & set(kept) and apart_stats["dropped"]["benchmark_turn"] >= len(kept)
    with pytest.raises(DraftcountError, match="temperature of 0"):
        SynthOptions(temperature=0.0)
    with pytest.raises(DraftcountError, match="top_p"):
        SynthOptions(top_p=0.0)


def test_the_command_writes_a_question_file_and_what_it_dropped(chat_target, tmp_path):
    model, tokenizer = chat_target
    save_model_dir(tmp_path / "target", model, tokenizer)
    model.generation_config.eos_token_id = sorted(frequent_stops(tokenizer))
    model.generation_config.save_pretrained(tmp_path / "target")
    out, summary_path = tmp_path / "synth.jsonl", tmp_path / "synth.json"
    assert main(["synth-questions", "--target", str(tmp_path / "target"), "--count", "4", "--max-generated", "32",
                 "--max-tokens", "6", "--top-p", "0.9", "--min-words", "1", "--min-ascii-letters", "0",
                 "--batch-size", "8", "--no-progress", "--out", str(out), "--summary", str(summary_path)]) == 0
    summary = json.loads(summary_path.read_text())
    questions = load_prompts(str(out))
    assert len(questions) == summary["kept"] >= 1 and {prompt.category for prompt in questions} == {"synthesized"}
    assert summary["sampling"] == {"temperature": 1.0, "top_p": 0.9, "max_tokens": 6}
    assert summary["user_turn_prefix"] == "<|system|>Be helpful.<eos><|user|>" and summary["written"] <= 32
