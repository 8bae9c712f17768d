# Paths and helpers shared by the rules (what to run is decided in harness/workflow_plan.py from the config and
# the method catalog, methods/__init__.py).
import json
import shlex
from pathlib import Path

from harness import workflow_plan as plan
from harness.catalog import method_names as catalog_methods

WORK = Path(config["work_dir"])
RESULTS = Path(config["results_dir"])


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


def variant_names():
    """The variants to run: bench.methods plus a default variant of every catalog method it leaves out, or
    only those listed in bench.only."""
    return plan.variant_names(config)


def engine_passes():
    """The engine passes (bench.passes): name -> engine switches over bench.engine, each a benchmark of its own."""
    return list(config["bench"].get("passes", {}))


def temperatures():
    return plan.temperature_names(config)


def dataset_prompts(dataset):
    return plan.dataset_prompts(config, dataset, WORK)


def dataset_limit(dataset):
    return plan.dataset_limit(config, dataset)
