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
from harness.data.chat_prompts import normalised, training_prompts, turn_texts
from harness.data.prompts import Prompt, load_prompts
from harness.errors import DraftcountError

ROOT = Path(__file__).resolve().parents[2]


def prompts(source: str, *texts: str) -> list[Prompt]:
    return [Prompt(id=str(index), category=source, turns=(text,)) for index, text in enumerate(texts)]


def test_a_question_a_benchmark_prompt_shares_a_turn_with_is_never_chosen():
    benchmark = [Prompt("b", "writing", ("Write a poem.", "Now  shorter.")), *prompts("gsm8k", "2 + 2?")]
    sources = {"mt_bench": prompts("writing", "Write a poem.", "Now shorter.", "Plan a trip."),
               "gsm8k": prompts("gsm8k", "2  + 2?", "3 + 3?", "3 + 3?", "4 + 4?")}
    chosen = training_prompts(sources, benchmark, {"train": 2, "heldout": 1}, seed=0)
    texts = [prompt.turns[0] for split in chosen.values() for prompt in split]
    assert sorted(texts) == ["3 + 3?", "4 + 4?", "Plan a trip."]  # apart from the benchmark by text, deduplicated
    assert not {normalised(text) for text in texts} & turn_texts(benchmark)
    assert [prompt.id.split("-")[0] for prompt in chosen["train"]] == ["mt_bench", "gsm8k"]  # each source in turn
    assert chosen == training_prompts(sources, benchmark, {"train": 2, "heldout": 1}, seed=0)  # one seed, one choice
    with pytest.raises(DraftcountError, match="hold 3 prompts apart from the benchmark's, 4 wanted"):
        training_prompts(sources, benchmark, {"train": 4}, seed=0)


def test_only_first_turns_are_asked():
    sources = {"mt": [Prompt("1", "writing", ("First?", "Second?"))]}
    assert training_prompts(sources, [], {"train": 1}, seed=0)["train"][0].turns == ("First?",)


def test_the_real_model_configs_training_questions_share_no_turn_with_its_benchmark(shared_data, tmp_path,
                                                                                     monkeypatch):
    """workflow/config/smollm2.yaml: rule chat_prompts' command (its arguments as the workflow builds them) against
    every prompt its bench jobs run (each set loaded with the job's limit and stratification)."""
    monkeypatch.chdir(ROOT)  # the config's prompt files are relative to the repository (../shared/data)
    config = yaml.safe_load((ROOT / "workflow" / "config" / "smollm2.yaml").read_text())
    arguments = jobs.chat_prompts_arguments(config)
    assert main(["chat-prompts", *arguments, "--out-dir", str(tmp_path), "--summary", str(tmp_path / "chat.json")]) == 0
    splits = {split: load_prompts(str(tmp_path / f"chat-{split}.jsonl")) for split in jobs.CHAT_SPLITS}
    assert {split: len(chosen) for split, chosen in splits.items()} == {
        split: config["chat_prompts"][split] for split in jobs.CHAT_SPLITS}
    benchmark = []
    for dataset in jobs.benchmark_sets(config):
        limit = datasets.dataset_limit(config, dataset)
        benchmark += load_prompts(datasets.dataset_prompts(config, dataset, Path("work")), limit=limit or None,
                                  stratify=bool(config["bench"].get("stratify")))
    assert len(benchmark) > 10 and {prompt.category for prompt in benchmark} >= {"writing", "gsm8k", "humaneval"}
    benchmark_turns = turn_texts(benchmark)
    seen: set[str] = set()
    for split, chosen in splits.items():
        texts = turn_texts(chosen)
        assert not texts & benchmark_turns, f"{split} shares a turn with the benchmark"
        assert not texts & seen and len(texts) == len(chosen), f"{split} repeats a question"
        seen |= texts
    sources = {prompt.id.split("-")[0] for prompt in splits["train"]}
    assert sources == {"mt_bench", "humaneval", "gsm8k", "spec_bench:translation,qa"}
    summary = json.loads((tmp_path / "chat.json").read_text())
    assert summary["benchmark"]["prompts"] == len(benchmark) and summary["splits"]["train"]["sha256"]
