"""The chat prompts a real target answers for its drafters' training data, never a benchmark prompt.

A chat target is not trained here, so its drafters learn from its own responses (``data: regenerate``, as the field
trains EAGLE-3, DFlash and DSpark): to questions drawn from prompt files (``NAME`` or ``NAME:category,...``, each
source's first turns), shuffled per source from a seed and taken from the sources in turn, each kept or dropped by
one ``harness.data.question_filters.QuestionSelector``: never a turn of the benchmark's selection
(whitespace-normalised text: Spec-Bench's first 80 questions are MT-Bench's, its math_reasoning questions are
GSM8K's), never sharing a word 8-gram with one of its prompts, never an exact or near duplicate of a question kept
before; then cut into consecutive splits (the last may take every question left), and the questions the target
wrote itself (rule synth_questions), through the same selector, joined to the last split. The splits are written as
question files (``question_id``, ``category``, ``turns``) that every loader reads; the data itself stays where it is
(loaders take a path).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.data.prompts import Prompt, load_prompts
from harness.data.question_filters import QuestionSelector, benchmark_selector
from harness.errors import DraftcountError
from harness.store.atomic import atomic_path


def parse_source(source: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME:cat1,cat2`` -> (NAME, the categories or None)."""
    name, _, categories = source.partition(":")
    return name, categories or None


def first_turns(prompts: list[Prompt], source: str) -> list[Prompt]:
    """Each prompt as a one-turn question (its first turn), its id prefixed with the source."""
    return [Prompt(id=f"{source}-{prompt.id}", category=prompt.category, turns=prompt.turns[:1]) for prompt in prompts]


def source_of(prompt: Prompt) -> str:
    """The source a chosen question came from (its id's prefix: ``first_turns``)."""
    return prompt.id.split("-")[0]


@dataclass
class Selection:
    splits: dict[str, list[Prompt]]
    offered: Counter = field(default_factory=Counter)  # source -> questions offered to the selector
    dropped: dict[str, Counter] = field(default_factory=dict)  # source -> reason -> questions dropped


def offered(prompt: Prompt, selector: QuestionSelector, selection: Selection) -> bool:
    """Whether the selector keeps ``prompt``; what its source offered and lost is counted in ``selection``."""
    source = source_of(prompt)
    selection.offered[source] += 1
    before = Counter(selector.dropped)
    if selector.offer(prompt.turns[0]):
        return True
    selection.dropped.setdefault(source, Counter()).update(selector.dropped - before)
    return False


def selected(prompts: list[Prompt], selector: QuestionSelector, selection: Selection) -> list[Prompt]:
    """``prompts`` the selector keeps, in order."""
    return [prompt for prompt in prompts if offered(prompt, selector, selection)]


def selected_in_turn(pools: list[list[Prompt]], selector: QuestionSelector, selection: Selection) -> list[Prompt]:
    """One kept prompt from each pool in turn (each offering its next until one is kept) until all are spent: every
    source gets an equal share of the kept questions while it lasts."""
    remaining, kept = [iter(pool) for pool in pools], []
    while remaining:
        for pool in list(remaining):
            chosen = next((prompt for prompt in pool if offered(prompt, selector, selection)), None)
            if chosen is None:
                remaining.remove(pool)
            else:
                kept.append(chosen)
    return kept


def training_prompts(sources: dict[str, list[Prompt]], benchmark: Iterable[Prompt], splits: dict[str, int | None],
                     seed: int, synthesized: list[Prompt] | None = None, near: float = 0.5) -> Selection:
    """``splits`` (name -> count, in order; None: every question left, the last split only) of first-turn questions
    from ``sources`` (name -> its prompts), shuffled per source, taken from each in turn and kept by one
    ``QuestionSelector`` (no turn nor word 8-gram of ``benchmark``, no exact or near duplicate); then the
    ``synthesized`` questions through the same selector, all joined to the last split. One line when the sources
    hold too few."""
    selector = benchmark_selector([turn for prompt in benchmark for turn in prompt.turns], near)
    pools = []
    for index, (name, prompts) in enumerate(sources.items()):
        pool = first_turns(prompts, name)
        random.Random(seed * 1009 + index).shuffle(pool)
        pools.append(pool)
    if None in list(splits.values())[:-1]:
        raise DraftcountError("only the last split may take every question left (all)")
    selection = Selection({})
    chosen = selected_in_turn(pools, selector, selection)
    wanted = sum(count for count in splits.values() if count is not None) + (None in splits.values())
    if len(chosen) < wanted:
        raise DraftcountError(f"the training prompt sources ({', '.join(sources)}) hold {len(chosen)} prompts apart "
                              f"from the benchmark's, {wanted} wanted: add a source or ask for fewer")
    start = 0
    for name, count in splits.items():
        selection.splits[name] = chosen[start:None if count is None else start + count]
        start += len(selection.splits[name])
    if synthesized:
        selection.splits[name] = selection.splits[name] + selected(synthesized, selector, selection)
    return selection


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
