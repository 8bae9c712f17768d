"""harness/training/data_commands.py: the benchmark prompts rules chat_prompts, synth_questions and data_table keep
training questions apart from, selected as the bench jobs select them (a set's categories and limit, stratified)."""

from __future__ import annotations

import argparse
import json

from harness.training.data_commands import _benchmark
from harness.workflow_datasets import benchmark_spec


def test_a_benchmark_set_of_one_category_is_the_prompts_its_bench_jobs_run(tmp_path):
    """Issue 79 item 4's decisive rows run Spec-Bench categories as sets of their own (bench.categories): the
    benchmark kept out of training is those prompts, not the file's first ones over every category."""
    prompts = tmp_path / "question.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": index, "category": category, "turns": [f"{category} {index}"]})
                               + "\n" for index, category in enumerate(["writing", "qa", "writing", "qa", "qa"])))
    config = {"bench": {"dataset_paths": {"sb_qa": str(prompts)}, "categories": {"sb_qa": "qa"},
                        "limits": {"sb_qa": 2}, "stratify": True}, "prompts": {}}
    assert benchmark_spec(config, "sb_qa") == "sb_qa:qa@2"
    assert benchmark_spec({"bench": {"limit": 8}, "prompts": {}}, "mt_bench") == "mt_bench@8"
    args = argparse.Namespace(path=[f"sb_qa={prompts}"], benchmark=[benchmark_spec(config, "sb_qa")], stratify=True)
    _, chosen = _benchmark(args)
    assert [prompt.turns[0] for prompt in chosen] == ["qa 1", "qa 3"]
    args.benchmark = ["sb_qa@2"]  # without its category: one of each, the wrong prompts
    assert [prompt.turns[0] for prompt in _benchmark(args)[1]] == ["writing 0", "qa 1"]
