"""Reading JSON-lines files with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.errors import DraftcountError


def read_jsonl_rows(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line; a malformed line is a DraftcountError naming it."""
    rows = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise DraftcountError(f"{path}:{number} is not valid JSON ({error.msg})") from None
    return rows
