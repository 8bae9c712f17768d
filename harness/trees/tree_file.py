"""Static tree shapes on disk: JSON with a ``parents`` list (node 0 the root), as the tree searches write them."""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import DraftcountError
from harness.store.atomic import atomic_path


def load_tree_file(path: str | Path) -> tuple[int, ...]:
    """The shape a tree search wrote; one clear error if the file is missing or holds no tree."""
    file = Path(path)
    if not file.is_file():
        raise DraftcountError(f"tree file {path} does not exist")
    try:
        parents = tuple(int(parent) for parent in json.loads(file.read_text())["parents"])
    except (ValueError, KeyError, TypeError) as error:
        raise DraftcountError(f"tree file {path} holds no 'parents' list ({error})") from None
    if not parents or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents) if i):
        raise DraftcountError(f"tree file {path}: 'parents' is not a tree with node 0 as root")
    return parents


def save_tree_file(path: str | Path, parents: tuple[int, ...], **details: object) -> None:
    """Write ``parents`` (and any JSON-friendly ``details``) atomically."""
    with atomic_path(path) as partial:
        partial.write_text(json.dumps({"parents": list(parents), **details}, indent=2) + "\n")
