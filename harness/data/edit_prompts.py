"""Successive edits of one module: the prompt set ``stdlib_edits``, where requests repeat each other's outputs.

Agentic and code-editing traffic sends nearly the same context again and again (the same file after each small
edit), so a request's answer is largely an earlier request's answer: what Suffix Decoding's global tree over earlier
outputs is for (its paper's AgenticSQL and SWE-Bench traces). Held-out files give that shape offline: a code prompt
(the lines up to a def/class header, as ``stdlib_code``'s) and then ``versions - 1`` successive edits of it, each
deleting one more line of its body (never the header), chosen at random from a fixed seed. The versions of one
module follow each other in the file, so a run answers them in that order, each after the one before.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from harness.data.code_prompts import cut_points
from harness.data.corpus import load_documents
from harness.errors import DraftcountError
from harness.store.atomic import atomic_path

CATEGORY = "edits"


def edit_versions(rows: list[str], versions: int, rng: random.Random) -> list[list[str]]:
    """``rows`` (ending with the header) and ``versions - 1`` successive edits, each one more body line deleted."""
    body = [index for index, row in enumerate(rows[:-1]) if row.strip()]
    if len(body) < versions - 1:
        raise DraftcountError(f"a cut of {len(rows)} lines has {len(body)} non-blank lines before its header, "
                              f"too few for {versions} versions")
    deleted = rng.sample(body, versions - 1)
    return [[row for index, row in enumerate(rows) if index not in deleted[:version]] for version in range(versions)]


def make_edit_prompts(documents, modules: int, versions: int, lines: int, seed: int) -> list[dict]:
    """``modules`` cuts of distinct held-out files, each as ``versions`` successive edits (one prompt each)."""
    rng = random.Random(seed)
    candidates = [(doc, points) for doc in documents if (points := cut_points(doc.text, lines))]
    if len(candidates) < modules:
        raise DraftcountError(f"only {len(candidates)} held-out files have a def/class header after line {lines}; "
                              f"{modules} edited modules asked")
    prompts = []
    for doc, points in sorted(rng.sample(candidates, modules), key=lambda item: item[0].path):
        point = rng.choice(points)
        rows = doc.text.splitlines()[point - lines + 1: point + 1]
        for version, edited in enumerate(edit_versions(rows, versions, rng)):
            prompts.append({"id": f"{doc.path}:{point + 1}#v{version}", "category": CATEGORY,
                            "prompt": "\n".join(edited) + "\n"})
    return prompts


def write_edit_prompts(heldout: Path, out: Path, modules: int, versions: int, lines: int, seed: int) -> int:
    prompts = make_edit_prompts(load_documents(heldout), modules, versions, lines, seed)
    with atomic_path(out) as partial:
        partial.write_text("".join(json.dumps(prompt) + "\n" for prompt in prompts))
    return len(prompts)
