"""Reading JSON-lines files with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.errors import DraftcountError


def read_utf8(path: Path, what: str = "file") -> str:
    """The text of ``path``, decoded strictly as UTF-8; a byte that is not is a DraftcountError naming the file, the
    byte offset and its line."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DraftcountError(f"{what} {path}: not UTF-8 at byte {error.start} (line {line}: "
                              f"{error.reason}, byte 0x{data[error.start]:02x})") from None


def read_jsonl_rows(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line; a malformed line (or a byte that is not UTF-8) is a
    DraftcountError naming it."""
    rows = []
    for number, line in enumerate(read_utf8(path, "JSON-lines file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as error:
            raise DraftcountError(f"{path}:{number} is not valid JSON ({error.msg})") from None
    return rows
