"""Atomic outputs: write to a ``.partial`` sibling, rename into place only when complete.

A killed step leaves at most a ``.partial`` file or folder behind, never a
half-written output that a later step (or a resumed run) would trust.
"""

from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """Yield a temporary path to write a file or folder at; it replaces ``path`` when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    _remove(partial)
    try:
        yield partial
        if partial.is_file():
            with partial.open("rb") as handle:
                os.fsync(handle.fileno())
        if path.is_dir():
            shutil.rmtree(path)
        os.replace(partial, path)
    except BaseException:
        _remove(partial)
        raise


def write_csv(path: Path | str, rows: list[dict], fields: list[str], extra: str = "raise") -> None:
    """``rows`` as a CSV table with the columns ``fields``, written atomically (``extra="ignore"``: keys of a row
    outside ``fields`` are left out)."""
    with atomic_path(path) as partial, partial.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction=extra)
        writer.writeheader()
        writer.writerows(rows)
