# Paths and helpers shared by the rules (what to run is decided in harness/workflow_plan.py from the config and
# the method catalog, methods/__init__.py).
import json
import re
import shlex
import sys
from pathlib import Path

from harness import workflow_jobs as jobs
from harness.store.workflow_config import or_stop
from harness import workflow_datasets as prompt_sets
from harness import workflow_plan as plan
from harness.catalog import method_names as catalog_methods
from harness.trees.beam_shape import beam_methods
from harness.trees.chain_shape import chain_methods
from snakemake.exceptions import WorkflowError

config.update(plan.with_implied_drafters(config))  # a trained-drafter method without a `drafters` entry: defaults
WORK = Path(config["work_dir"])
RESULTS = Path(config["results_dir"])


def all_cores():
    """Every core the run was given: the threads of a rule that must run alone on the machine (a timing). 1 when no
    --cores was given, where nothing runs (`snakemake --unlock`, `--list`): Snakemake's own `workflow.cores` is then
    an error that stopped those commands."""
    try:
        return workflow.cores
    except WorkflowError:
        return 1


def external_models():
    """True when the config names its own checkpoints (`models:`) instead of building the zoo."""
    return "models" in config


def imported_target():
    """True when the target is a GGUF checkpoint fetched and converted here (`gguf:`, rules/real.smk), not trained:
    a chat target, whose drafters and draft LM learn from its own answers to chat questions."""
    return "gguf" in config


def target_model():
    return plan.local_source(config["models"]["target"], WORK) if external_models() else work("models/target")


def train_tokens():
    """The training split's token stream: the corpus's, or for an imported chat target its own answers to the
    training questions (rule regenerate_chat): what data: tokens, data: features and the datastore read."""
    return work("data/tokens/regenerated.pt" if imported_target() else "data/tokens/train.pt")


def corpus_summary():
    """What the training data is (its SHA-256 fingerprints a trained LM): the corpus's, or the chat questions'."""
    return work("prompts/chat.json" if imported_target() else "data/corpus/corpus.json")


def calibration_prompts():
    """Prompts apart from the benchmark's that stand's tree and the tree shapes are calibrated on: cut from the
    training split, or for an imported chat target its calibration split of chat questions."""
    return work("prompts/chat-calibration.jsonl" if imported_target() else "prompts/calibration.jsonl")


def draft_model():
    if external_models():
        if "draft" not in config["models"]:
            raise ValueError("a variant of sd or tree_sd needs models.draft in the config")
        return plan.local_source(config["models"]["draft"], WORK)
    return work("models/draft")


# A model or drafter given as a hub id (owner/name) is fetched once into work/hub/owner--name: links into the
# hub cache, so every rule takes a local directory. Offline without the files in the cache: one line, no traceback.
HUB = plan.hub_sources(config)
if HUB:

    rule fetch_hub:
        output:
            directory(str(WORK / plan.HUB_DIR / "{repo}")),
        params:
            repo_id=lambda wildcards: HUB[wildcards.repo],
            kind=lambda wildcards: "drafter" if HUB[wildcards.repo] not in config.get("models", {}).values() else "model",
        wildcard_constraints:
            repo="|".join(map(re.escape, HUB)),
        localrule: True
        resources:
            mem_mb=1000,
            runtime=120,
        shell:
            "python -m harness fetch {params.repo_id} --kind {params.kind} --out {output}"


def tokenizer_dir():
    """The tokenizer the training data is tokenized with: the zoo's own, or the target's."""
    return target_model() if external_models() or imported_target() else work("models/tokenizer")


def compute_device():
    """Where models run (bench jobs, feature dumps, drafter training): bench.device."""
    return str(config["bench"].get("device", "cpu"))


QUICK = config.get("quick", {})  # the quick GPU check (workflow/config/gpu-quick.yaml, rules/quick.smk)


def gpus_per_job(timed=False):
    """The `gpu` resource of a job that runs a model: 1 on a CUDA device (SLURM: --gpus=1), else 0. With
    quick.share_gpu only timed jobs (bench) hold the one GPU alone; training and lossless runs share it."""
    if not compute_device().startswith("cuda"):
        return 0
    return 1 if timed or not QUICK.get("share_gpu", False) else 0


def work(path):
    return str(WORK / path)


def results(path):
    return str(RESULTS / path)


def variant_names():
    """The variants to run: bench.methods plus a default variant of every catalog method it leaves out, or
    only those listed in bench.only."""
    return plan.variant_names(config)


def engine_passes():
    """The engine passes (bench.passes): name -> engine switches over bench.engine, each a benchmark of its own."""
    return list(config["bench"].get("passes", {}))


def dataset_prompts(dataset):
    return prompt_sets.dataset_prompts(config, dataset, WORK)


# Every variant's options parse as its method's (names and values, torch-free): a bad one stops the plan, one line.
or_stop(lambda: plan.check_variant_options(config, WORK))
