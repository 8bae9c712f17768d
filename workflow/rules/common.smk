# Paths and helpers shared by the rules.
import json
from pathlib import Path

WORK = Path(config["work_dir"])
RESULTS = Path(config["results_dir"])
BUILTIN_DATASETS = {"humaneval", "stdlib_code"}


def external_models():
    """True when the config names its own checkpoints (`models:`) instead of building the zoo."""
    return "models" in config


def target_model():
    return config["models"]["target"] if external_models() else work("models/target")


def draft_model():
    if external_models():
        if "draft" not in config["models"]:
            raise ValueError("a variant of sd or tree_sd needs models.draft in the config")
        return config["models"]["draft"]
    return work("models/draft")


def tokenizer_dir():
    """The tokenizer the training corpus is tokenized with: the zoo's own, or the target's."""
    return target_model() if external_models() else work("models/tokenizer")


def compute_device():
    """Where models run (bench jobs, feature dumps, drafter training): bench.device."""
    return str(config["bench"].get("device", "cpu"))


def gpus_per_job():
    """The `gpu` resource of a job that runs a model: 1 on a CUDA device (SLURM: --gpus=1), else 0."""
    return 1 if compute_device().startswith("cuda") else 0


def work(path):
    return str(WORK / path)


def results(path):
    return str(RESULTS / path)


def as_json(value):
    """A config section as a shell-quoted JSON argument."""
    return "'" + json.dumps(value).replace("'", "'\\''") + "'"


def method_names():
    """The variants to run: every entry of bench.methods, or only those listed in bench.only."""
    names = list(config["bench"]["methods"])
    only = config["bench"].get("only")
    if only:
        unknown = [name for name in only if name not in names]
        if unknown:
            raise ValueError(f"bench.only names {unknown[0]!r}, which is not under bench.methods")
        names = [name for name in names if name in only]
    return names


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
