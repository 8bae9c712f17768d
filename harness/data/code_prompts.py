"""Code-completion prompts cut from held-out source files: a few lines ending at a def/class header.

Each prompt is the ``lines`` lines up to and including a line that opens a
function or class, so the model's job is to write its body.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from harness.store.atomic import atomic_path
from harness.data.corpus import load_documents, select_documents
from harness.errors import DraftcountError

HEADERS = ("def ", "class ", "async def ")


def cut_points(text: str, lines: int) -> list[int]:
    """Line indices of def/class headers with at least ``lines - 1`` lines before them."""
    rows = text.splitlines()
    return [i for i, row in enumerate(rows) if i >= lines - 1 and row.lstrip().startswith(HEADERS) and row.rstrip().endswith(":")]


def make_code_prompts(documents, count: int, lines: int, seed: int, category: str = "stdlib_code") -> list[dict]:
    rng = random.Random(seed)
    candidates = [(doc, point) for doc in documents for point in cut_points(doc.text, lines)]
    if len(candidates) < count:
        raise DraftcountError(f"only {len(candidates)} code prompts can be cut from the held-out files, {count} asked")
    chosen = rng.sample(candidates, count)
    prompts = []
    for doc, point in sorted(chosen, key=lambda item: (item[0].path, item[1])):
        rows = doc.text.splitlines()[point - lines + 1 : point + 1]
        prompts.append({"id": f"{doc.path}:{point + 1}", "category": category, "prompt": "\n".join(rows) + "\n"})
    return prompts


def write_code_prompts(heldout: Path, out: Path, count: int, lines: int, seed: int,
                       domains: dict[str, list[str]] | None = None) -> int:
    """``count`` prompts cut from the documents in ``heldout``; with ``domains`` (name -> path patterns),
    ``count`` from each domain's documents, the domain as their category (a mixed-domain prompt set)."""
    documents = load_documents(heldout)
    if domains:
        prompts = [prompt for name, patterns in domains.items()
                   for prompt in make_code_prompts(select_documents(documents, patterns), count, lines, seed, name)]
    else:
        prompts = make_code_prompts(documents, count, lines, seed)
    with atomic_path(out) as partial:
        partial.write_text("".join(json.dumps(prompt) + "\n" for prompt in prompts))
    return len(prompts)
