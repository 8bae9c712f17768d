"""Result records: one JSON object per generated turn, written atomically.

A run writes to ``<out>.partial`` and renames it to ``<out>`` only when every
record is written, so a killed run never leaves a file a later step would trust.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

from harness.store.atomic import atomic_path

SCHEMA_VERSION = 1
# the keys of a record's counters.phase_seconds, in order (harness.backend.phases times them; host is the rest)
PHASES = ("prefill", "target", "drafter", "verify", "host")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def git_revision(root: Path = PROJECT_ROOT) -> str | None:
    """HEAD of the checkout the harness runs from, with '-dirty' when it has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def environment() -> dict[str, Any]:
    """Versions, git revision and hardware, recorded in every result record."""
    import torch  # here, so that reading records (summaries, reports) does not load torch

    gpus = [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return {
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": _package_version("transformers"),
            "draftcount": _package_version("draftcount"),
            "cuda": torch.version.cuda,
        },
        "git_revision": git_revision(),
        "hardware": {
            "cpu": _cpu_name(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "gpus": gpus,
            "platform": platform.platform(),
        },
    }


@contextmanager
def atomic_jsonl(path: Path) -> Iterator[IO[str]]:
    """Write JSON lines to ``path`` so that it appears only complete (see harness.store.atomic)."""
    with atomic_path(path) as partial, partial.open("w", encoding="utf-8") as handle:
        yield handle


def write_record(handle: IO[str], record: dict[str, Any]) -> None:
    handle.write(json.dumps(record, sort_keys=True) + "\n")
    handle.flush()


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records of a finished run (``.jsonl``, or gzip-compressed ``.jsonl.gz`` as published under
    ``results/records``); refuses files of another schema version."""
    text = (gzip.decompress(Path(path).read_bytes()).decode("utf-8") if str(path).endswith(".gz")
            else Path(path).read_text(encoding="utf-8"))
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    for record in records:
        if record.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{path}: record schema {record.get('schema_version')} != {SCHEMA_VERSION}")
    return records
