"""The chat questions a real target answers for its drafters: never a benchmark prompt (compared by text), drawn
from every source in turn, split without overlap; and the real-model config's training set against its benchmark,
as the workflow's rule chat_prompts and its bench jobs select them, from the shared data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness import workflow_jobs as jobs
from harness import workflow_datasets as datasets
from harness.cli import main
from harness.data.chat_prompts import source_of, training_prompts
from harness.data.prompts import Prompt, load_prompts
from harness.data.question_filters import normalised, shared_ngrams
from harness.errors import DraftcountError

ROOT = Path(__file__).resolve().parents[2]


def turn_texts(prompts: list[Prompt]) -> set[str]:
    return {normalised(turn) for prompt in prompts for turn in prompt.turns}


def prompts(source: str, *texts: str) -> list[Prompt]:
    return [Prompt(id=str(index), category=source, turns=(text,)) for index, text in enumerate(texts)]


def test_a_question_a_benchmark_prompt_shares_a_turn_with_is_never_chosen():
    benchmark = [Prompt("b", "writing", ("Write a poem.", "Now  shorter.")), *prompts("gsm8k", "2 + 2?")]
    sources = {"mt_bench": prompts("writing", "Write a poem.", "Now shorter.", "Plan a trip."),
               "gsm8k": prompts("gsm8k", "2  + 2?", "3 + 3?", "3 + 3?", "4 + 4?")}
    chosen = training_prompts(sources, benchmark, {"train": 2, "heldout": 1}, seed=0)
    texts = [prompt.turns[0] for split in chosen.splits.values() for prompt in split]
    assert sorted(texts) == ["3 + 3?", "4 + 4?", "Plan a trip."]  # apart from the benchmark by text, deduplicated
    assert not {normalised(text) for text in texts} & turn_texts(benchmark)
    assert [source_of(prompt) for prompt in chosen.splits["train"]] == ["mt_bench", "gsm8k"]  # each source in turn
    again = training_prompts(sources, benchmark, {"train": 2, "heldout": 1}, seed=0)
    assert chosen.splits == again.splits  # one seed, one choice
    assert dict(chosen.offered) == {"mt_bench": 3, "gsm8k": 4}
    assert chosen.dropped == {"mt_bench": {"benchmark_turn": 2}, "gsm8k": {"benchmark_turn": 1, "duplicate_exact": 1}}
    with pytest.raises(DraftcountError, match="hold 3 prompts apart from the benchmark's, 4 wanted"):
        training_prompts(sources, benchmark, {"train": 4}, seed=0)


def test_only_first_turns_are_asked():
    sources = {"mt": [Prompt("1", "writing", ("First?", "Second?"))]}
    assert training_prompts(sources, [], {"train": 1}, seed=0).splits["train"][0].turns == ("First?",)


def test_the_last_split_takes_every_question_left_and_the_synthesized_ones_through_the_same_filter():
    """train: all after the held-out split; the questions the target wrote join it, each dropped when it copies a
    benchmark 8-gram or nearly repeats a shared set's question."""
    benchmark = [Prompt("b", "writing", ("Compose an engaging travel blog post about a recent trip to Hawaii.",))]
    sources = {"gsm8k": prompts("gsm8k", "A farmer has 12 cows and buys 5 more cows at the market. How many now?",
                                "Tom reads 20 pages a day for a week. How many pages does he read?",
                                "A shop sells pens at 3 dollars each. How much do 7 pens cost in all?")}
    synthesized = [Prompt(f"synth-{index}", "synthesized", (text,)) for index, text in enumerate([
        "Could you compose an engaging travel blog post about a recent trip to Hawaii?",  # a benchmark 8-gram
        "A farmer has 12 cows and buys 5 more cows at the market. How many cows now?",  # near a GSM8K question
        "What are three good habits for learning a new language quickly?"])]
    chosen = training_prompts(sources, benchmark, {"heldout": 1, "train": None}, seed=0, synthesized=synthesized)
    assert len(chosen.splits["heldout"]) == 1 and len(chosen.splits["train"]) == 3
    assert [prompt.id for prompt in chosen.splits["train"]][-1] == "synth-2"
    assert chosen.dropped["synth"] == {"benchmark_8gram": 1, "duplicate_near": 1}
    with pytest.raises(DraftcountError, match="only the last split"):
        training_prompts(sources, benchmark, {"train": None, "heldout": 1}, seed=0)
    with pytest.raises(DraftcountError, match="hold 3 prompts .* 4 wanted"):
        training_prompts(sources, benchmark, {"heldout": 3, "train": None}, seed=0)


def test_the_real_model_configs_training_questions_share_no_turn_nor_8gram_with_its_benchmark(shared_data, tmp_path,
                                                                                             monkeypatch):
    """workflow/config/smollm2.yaml: rule chat_prompts' command (its arguments as the workflow builds them, with a
    synthesized question file standing in for rule synth_questions': one of its questions copies a benchmark prompt's
    8 words) against every prompt its bench jobs run (each set loaded with the job's limit and stratification): no
    question of any split shares a turn or a word 8-gram with one."""
    monkeypatch.chdir(ROOT)  # the config's prompt files are relative to the repository (../shared/data)
    config = yaml.safe_load((ROOT / "workflow" / "config" / "smollm2.yaml").read_text())
    benchmark = []
    for dataset in jobs.benchmark_sets(config):
        limit = datasets.dataset_limit(config, dataset)
        benchmark += load_prompts(datasets.dataset_prompts(config, dataset, Path("work")),
                                  datasets.dataset_category(config, dataset), limit=limit or None,
                                  stratify=bool(config["bench"].get("stratify")))
    assert len(benchmark) > 10 and {prompt.category for prompt in benchmark} >= {"writing", "gsm8k", "humaneval"}
    # the decisive rows' Spec-Bench sets (issue 79 item 4), one category each: those prompts, not the file's first
    assert sum(prompt.category in ("math_reasoning", "qa") for prompt in benchmark) == 40
    words = benchmark[0].turns[0].split()
    copied = "Please help: " + " ".join(words[:8]) + " thanks."  # the benchmark's first 8 words, inside a question
    synthesized = tmp_path / "synth.jsonl"
    synthesized.write_text("\n".join(json.dumps({"question_id": index, "category": "synthesized", "turns": [text]})
                                     for index, text in enumerate([copied, "What makes a good night's sleep?"])) + "\n")
    arguments = jobs.chat_prompts_arguments(config)
    assert main(["chat-prompts", *arguments, "--synthesized", str(synthesized), "--out-dir", str(tmp_path),
                 "--summary", str(tmp_path / "chat.json")]) == 0
    splits = {split: load_prompts(str(tmp_path / f"chat-{split}.jsonl")) for split in jobs.CHAT_SPLITS}
    for split in jobs.CHAT_SPLITS:
        wanted = config["chat_prompts"][split]
        assert len(splits[split]) == wanted if wanted != "all" else len(splits[split]) > 1000
    benchmark_turns = turn_texts(benchmark)
    seen: set[str] = set()
    for split, chosen in splits.items():
        texts = turn_texts(chosen)
        assert not texts & benchmark_turns, f"{split} shares a turn with the benchmark"
        assert shared_ngrams(texts, benchmark_turns) == 0, f"{split} shares a word 8-gram with the benchmark"
        assert not texts & seen and len(texts) == len(chosen), f"{split} repeats a question"
        seen |= texts
    assert shared_ngrams([copied], benchmark_turns) == 1 and normalised(copied) not in seen
    assert "What makes a good night's sleep?" in seen
    sources = {source_of(prompt) for prompt in splits["train"]}
    assert sources == {"mt_bench", "humaneval", "gsm8k", "spec_bench:translation,qa", "synth"}
    summary = json.loads((tmp_path / "chat.json").read_text())
    assert summary["benchmark"]["prompts"] == len(benchmark) and summary["splits"]["train"]["sha256"]
    assert summary["sources"]["synth"] == {"offered": 2, "dropped": {"benchmark_8gram": 1}}
