"""A drafter directory's metadata file (``draftcount_drafter.json``, written by ``harness.training.drafters``), read
where a run records what its drafter is without loading it."""

from __future__ import annotations

from pathlib import Path

from harness.store.files import read_json

META_FILE = "draftcount_drafter.json"


def drafter_data(drafter: str | Path | None) -> str | None:
    """What a trained drafter learnt from, by its metadata's ``data``: ``regenerated`` (the target's own
    continuations or answers, ``python -m harness regenerate``, or a feature dump of them), else ``corpus``; None
    without a drafter or metadata (a released one)."""
    meta = Path(drafter) / META_FILE if drafter else None
    if meta is None or not meta.is_file():
        return None
    data = Path(read_json(meta, "drafter metadata").get("data") or "")
    if (data / "index.json").is_file():  # a feature dump: the token stream it was cut from
        data = Path(read_json(data / "index.json", "feature dump index").get("source") or "")
    return "regenerated" if data.name.startswith("regenerated") else "corpus"
