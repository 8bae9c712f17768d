# Paths and helpers shared by the rules.
import json
from pathlib import Path

WORK = Path(config["work_dir"])
RESULTS = Path(config["results_dir"])
BUILTIN_DATASETS = {"humaneval", "stdlib_code"}


def work(path):
    return str(WORK / path)


def results(path):
    return str(RESULTS / path)


def as_json(value):
    """A config section as a shell-quoted JSON argument."""
    return "'" + json.dumps(value).replace("'", "'\\''") + "'"


def method_names():
    return list(config["bench"]["methods"])


def temperatures():
    return [f"{t:g}" for t in config["bench"]["temperatures"]]


def dataset_prompts(dataset):
    """The prompt set a dataset name stands for: built by the workflow, or a user path."""
    if dataset == "stdlib_code":
        return work("prompts/stdlib_code.jsonl")
    if dataset == "humaneval":
        return "humaneval"
    paths = config["bench"].get("dataset_paths", {})
    if dataset not in paths:
        raise ValueError(f"dataset {dataset!r} is neither built in ({sorted(BUILTIN_DATASETS)}) nor in bench.dataset_paths")
    return paths[dataset]


def dataset_limit(dataset):
    if dataset == "humaneval":
        return config["prompts"]["humaneval_limit"]
    return config["bench"].get("limit", 0)
