"""The prompt sets a plan runs: where each dataset name's prompts come from, how many a bench job runs, their
categories as far as the plan knows them, and a job's time limit (``harness.workflow_plan`` re-exports them for
the Snakefile)."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.context_length import CATEGORY_PREFIX as LONG_CONTEXT_PREFIX
from harness.data.edit_prompts import CATEGORY as EDITS_CATEGORY
from harness.data.prompts import load_prompts

BUILT_PROMPT_SETS = ("stdlib_code", "stdlib_domains", "stdlib_long", "stdlib_edits")  # the workflow builds (zoo.smk)
BUILTIN_DATASETS = ("humaneval", *BUILT_PROMPT_SETS)


def dataset_prompts(config: dict, dataset: str, work_dir: Path) -> str:
    """The prompt set a dataset name stands for: built by the workflow, or a user path."""
    if dataset in BUILT_PROMPT_SETS:
        return str(Path(work_dir) / "prompts" / f"{dataset}.jsonl")
    if dataset == "humaneval":
        return "humaneval"
    paths = config["bench"].get("dataset_paths", {})
    if dataset not in paths:
        raise ValueError(f"dataset {dataset!r} is neither built in ({list(BUILTIN_DATASETS)}) nor in "
                         "bench.dataset_paths")
    return paths[dataset]


def dataset_limit(config: dict, dataset: str) -> int:
    """Prompts a bench job runs of ``dataset``: its bench.limits entry, else prompts.humaneval_limit or bench.limit."""
    if dataset in config["bench"].get("limits", {}):
        return config["bench"]["limits"][dataset]
    return config["prompts"]["humaneval_limit"] if dataset == "humaneval" else config["bench"].get("limit", 0)


def dataset_category(config: dict, dataset: str) -> str | None:
    """The categories a bench job keeps of ``dataset``'s file (bench.categories: one Spec-Bench category as a set of
    its own, say), comma-separated; None: every category."""
    return config["bench"].get("categories", {}).get(dataset)


def benchmark_spec(config: dict, dataset: str) -> str:
    """``dataset`` as the bench jobs select it, for the rules that keep training questions apart from the benchmark:
    ``NAME[:CATEGORIES][@LIMIT]``."""
    category, limit = dataset_category(config, dataset), dataset_limit(config, dataset)
    return dataset + (f":{category}" if category else "") + (f"@{limit}" if limit else "")


def dataset_selection(config: dict, dataset: str, work_dir: Path) -> tuple[int, dict[str, int]] | None:
    """(turns, prompts per category) a bench job over ``dataset`` will run: its prompt file loaded at plan time with
    the job's categories and limit (stratified or not); None for a set the workflow builds or a file that is not
    there yet."""
    source = dataset_prompts(config, dataset, work_dir)
    if dataset in BUILTIN_DATASETS or not Path(source).expanduser().exists():
        return None
    prompts = load_prompts(source, dataset_category(config, dataset), limit=dataset_limit(config, dataset) or None,
                           stratify=bool(config["bench"].get("stratify")))
    counts: dict[str, int] = {}
    for prompt in prompts:
        counts[prompt.category] = counts.get(prompt.category, 0) + 1
    return sum(len(prompt.turns) for prompt in prompts), counts


def planned_categories(config: dict, dataset: str,
                       selection: tuple[int, dict[str, int]] | None) -> tuple[str, ...] | None:
    """The categories of a prompt set's prompts as far as the plan knows them (``selection``: its
    ``dataset_selection``); None when it cannot know them (a view that depends on them then applies)."""
    if dataset in ("humaneval", "stdlib_code"):
        return (dataset,)
    if dataset == "stdlib_domains":  # zoo.smk's domain_prompts: the domains are the categories
        return tuple(config.get("domains", {}))
    if dataset == "stdlib_edits":  # zoo.smk's edit_prompts: one category
        return (EDITS_CATEGORY,)
    if dataset == "stdlib_long":  # zoo.smk's long_prompts: one category ctx<L> per bucket (harness.data.long_context)
        buckets = config["prompts"].get("long_buckets")
        return tuple(f"{LONG_CONTEXT_PREFIX}{bucket}" for bucket in buckets) if buckets else None
    return tuple(selection[1]) if selection else None


def bench_runtime_minutes(config: dict, dataset: str, selection: tuple[int, dict[str, int]] | None) -> int:
    """A bench job's time limit (SLURM -t) over ``dataset`` with its ``dataset_selection``: with
    ``bench.seconds_per_token`` (the target's measured seconds per `ar` token on the device), 10 minutes of loading
    plus turns x max_new_tokens x that x 3 (the `ar` baseline, and the method at up to twice ar's time) x repeats;
    60 minutes without it or for a set built by the workflow."""
    bench = config["bench"]
    per_token = bench.get("seconds_per_token")
    turns = dataset_limit(config, dataset) if dataset == "humaneval" else selection[0] if selection else 0
    if not per_token or not turns:
        return 60
    seconds = turns * bench.get("max_new_tokens", 128) * float(per_token) * 3 * bench.get("repeats", 1)
    return 10 + int(seconds / 60 + 0.999)
