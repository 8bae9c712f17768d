"""The chat prompts a real target answers for its drafters' training data, never a benchmark prompt.

A chat target is not trained here, so its drafters learn from its own responses (``data: regenerate``, as the field
trains EAGLE-3, DFlash and DSpark): to questions drawn from prompt files (``NAME`` or ``NAME:category,...``, each
source's first turns), minus every prompt that shares a turn with the benchmark's selection (whitespace-normalised
text: Spec-Bench's first 80 questions are MT-Bench's, its math_reasoning questions are GSM8K's), deduplicated,
shuffled per source from a seed and taken from the sources in turn, then cut into consecutive splits (train,
heldout, calibration). The splits are written as question files (``question_id``, ``category``, ``turns``) that
every loader reads; the data itself stays where it is (loaders take a path).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable
from pathlib import Path

from harness.data.prompts import Prompt, load_prompts
from harness.errors import DraftcountError
from harness.store.atomic import atomic_path


def normalised(text: str) -> str:
    return " ".join(text.split())


def turn_texts(prompts: Iterable[Prompt]) -> set[str]:
    """Every turn of ``prompts``, whitespace-normalised: what a training prompt may not share with them."""
    return {normalised(turn) for prompt in prompts for turn in prompt.turns}


def parse_source(source: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME:cat1,cat2`` -> (NAME, the categories or None)."""
    name, _, categories = source.partition(":")
    return name, categories or None


def first_turns(prompts: list[Prompt], source: str) -> list[Prompt]:
    """Each prompt as a one-turn question (its first turn), its id prefixed with the source."""
    return [Prompt(id=f"{source}-{prompt.id}", category=prompt.category, turns=prompt.turns[:1]) for prompt in prompts]


def candidates(prompts: list[Prompt], taken: set[str]) -> list[Prompt]:
    """``prompts`` that share no turn with ``taken`` nor with one kept before them."""
    kept, seen = [], set(taken)
    for prompt in prompts:
        texts = {normalised(turn) for turn in prompt.turns}
        if texts & seen:
            continue
        seen |= texts
        kept.append(prompt)
    return kept


def interleaved(pools: list[list[Prompt]]) -> list[Prompt]:
    """One prompt from each pool in turn until all are empty: every source gets an equal share while it lasts."""
    order, depth = [], 0
    while any(depth < len(pool) for pool in pools):
        order += [pool[depth] for pool in pools if depth < len(pool)]
        depth += 1
    return order


def training_prompts(sources: dict[str, list[Prompt]], benchmark: Iterable[Prompt], splits: dict[str, int],
                     seed: int) -> dict[str, list[Prompt]]:
    """``splits`` (name -> count, in order) of first-turn questions from ``sources`` (name -> its prompts) that share
    no turn with ``benchmark`` or with each other; one line when the sources hold too few."""
    taken = turn_texts(benchmark)
    pools = []
    for index, (name, prompts) in enumerate(sources.items()):
        pool = first_turns(prompts, name)
        random.Random(seed * 1009 + index).shuffle(pool)
        pools.append(candidates(pool, taken))
    chosen = candidates(interleaved(pools), set())  # a question two sources share: once
    wanted = sum(splits.values())
    if len(chosen) < wanted:
        raise DraftcountError(f"the training prompt sources ({', '.join(sources)}) hold {len(chosen)} prompts apart "
                              f"from the benchmark's, {wanted} wanted: add a source or ask for fewer")
    result, start = {}, 0
    for name, count in splits.items():
        result[name] = chosen[start:start + count]
        start += count
    return result


def load_sources(sources: list[str], paths: dict[str, str]) -> dict[str, list[Prompt]]:
    """Each ``NAME[:categories]`` loaded from ``paths[NAME]`` (or the built-in ``humaneval``)."""
    loaded = {}
    for source in sources:
        name, categories = parse_source(source)
        if name != "humaneval" and name not in paths:
            raise DraftcountError(f"training prompt source {name!r} is not in bench.dataset_paths "
                                  f"({', '.join(paths) or 'none'})")
        loaded[source] = load_prompts(paths.get(name, name), category=categories)
    return loaded


def write_question_file(prompts: list[Prompt], path: Path) -> str:
    """``prompts`` as a question file (one JSON object a line); returns its SHA-256."""
    lines = [json.dumps({"question_id": prompt.id, "category": prompt.category, "turns": list(prompt.turns)},
                        ensure_ascii=False) for prompt in prompts]
    text = "\n".join(lines) + "\n"
    with atomic_path(path) as partial:
        partial.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def categories_of(prompts: list[Prompt]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for prompt in prompts:
        counts[prompt.category] = counts.get(prompt.category, 0) + 1
    return counts
