"""The default training corpus: the Python standard library's source on the running machine.

Files are split into train and held-out sets by a hash of their relative path
(deterministic, independent of file order); the test suites are excluded or
kept per config. Documents are stored one JSON object per line.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import platform
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.store.atomic import atomic_path
from harness.errors import DraftcountError
from harness.store.jsonl import read_jsonl_rows

TEST_DIRS = {"test", "tests", "idle_test"}
SKIPPED_DIRS = {"site-packages", "dist-packages", "__pycache__"}


@dataclass(frozen=True)
class Document:
    path: str
    text: str


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_test_file(relative: Path) -> bool:
    return bool(TEST_DIRS.intersection(relative.parts[:-1])) or relative.name.startswith("test_")


def collect_python_files(root: Path, include_tests: bool) -> list[Path]:
    """Relative paths of the .py files under ``root``, sorted; site-packages and caches skipped."""
    if not root.is_dir():
        raise DraftcountError(f"corpus root {root} is not a directory")
    files = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if SKIPPED_DIRS.intersection(relative.parts) or (not include_tests and is_test_file(relative)):
            continue
        files.append(relative)
    if not files:
        raise DraftcountError(f"no .py files under {root}")
    return sorted(files)


def is_heldout(relative: Path, fraction: float, seed: int) -> bool:
    digest = hashlib.sha256(f"{seed}:{relative.as_posix()}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def read_documents(root: Path, files: list[Path]) -> Iterator[Document]:
    for relative in files:
        text = (root / relative).read_text(encoding="utf-8", errors="replace")
        if text.strip():
            yield Document(relative.as_posix(), text)


def write_documents(path: Path, documents: list[Document]) -> str:
    """Write documents as JSON lines; returns the sha256 of what was written."""
    digest = hashlib.sha256()
    with atomic_path(path) as partial, partial.open("w", encoding="utf-8") as handle:
        for document in documents:
            line = json.dumps({"path": document.path, "text": document.text}) + "\n"
            digest.update(line.encode())
            handle.write(line)
    return digest.hexdigest()


def select_documents(documents: list[Document], patterns: list[str]) -> list[Document]:
    """The documents whose path matches one of the glob ``patterns`` (e.g. ``email/*``: a package's files)."""
    return [document for document in documents if any(fnmatch.fnmatch(document.path, pattern) for pattern in patterns)]


def load_documents(path: Path) -> list[Document]:
    with Path(path).open(encoding="utf-8") as handle:
        return [Document(**json.loads(line)) for line in handle if line.strip()]


def cap_documents(documents: list[Document], max_bytes: int, seed: int) -> list[Document]:
    """At most ``max_bytes`` of ``documents`` (at least one): whole documents taken in an order drawn by a hash of
    their path (so the cut samples the whole library, not its first packages), returned in their original order."""
    def rank(doc: Document) -> bytes:
        return hashlib.sha256(f"{seed}:cap:{doc.path}".encode()).digest()

    kept, total = set(), 0
    for index in sorted(range(len(documents)), key=lambda index: rank(documents[index])):
        size = len(documents[index].text.encode())
        if kept and total + size > max_bytes:
            continue
        kept.add(index)
        total += size
    return [doc for index, doc in enumerate(documents) if index in kept]


def split_and_write(out_dir: Path, documents: list[Document], heldout_fraction: float, seed: int,
                    source: dict, max_train_bytes: int | None = None) -> dict:
    """Split documents train/held-out by a hash of their path; write train.jsonl, heldout.jsonl and
    corpus.json (the source, sizes and hashes) under ``out_dir``. ``max_train_bytes``: the train split cut to at
    most that many bytes (``cap_documents``; a smoke-size run's models read a sliver of the library, and
    tokenizing all of it was most of their first minute); the held-out split is never cut."""
    if not 0 < heldout_fraction < 1:
        raise DraftcountError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    heldout = [doc for doc in documents if is_heldout(Path(doc.path), heldout_fraction, seed)]
    train = [doc for doc in documents if not is_heldout(Path(doc.path), heldout_fraction, seed)]
    if not heldout or not train:
        raise DraftcountError("the train/held-out split left one side empty; change heldout_fraction")
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {**source, "heldout_fraction": heldout_fraction, "seed": seed, "splits": {}}
    if max_train_bytes is not None:
        train = cap_documents(train, max_train_bytes, seed)
        summary["max_train_bytes"] = max_train_bytes
    for name, docs in (("train", train), ("heldout", heldout)):
        sha = write_documents(out_dir / f"{name}.jsonl", docs)
        summary["splits"][name] = {
            "files": len(docs), "bytes": sum(len(doc.text.encode()) for doc in docs), "sha256": sha,
        }
    (out_dir / "corpus.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def build_stdlib_corpus(out_dir: Path, include_tests: bool, heldout_fraction: float, seed: int,
                        root: Path | None = None, max_train_bytes: int | None = None) -> dict:
    """The standard library's .py files as documents, split and written by ``split_and_write``."""
    root = root or stdlib_root()
    documents = list(read_documents(root, collect_python_files(root, include_tests)))
    source = {"source": "python-stdlib", "root": str(root), "python_version": platform.python_version(),
              "include_tests": include_tests}
    return split_and_write(out_dir, documents, heldout_fraction, seed, source, max_train_bytes)


def read_text_jsonl(path: Path, field: str = "text") -> list[Document]:
    """Documents from a JSON-lines file with a text field per line (a user's own training text)."""
    path = Path(path)
    if not path.is_file():
        raise DraftcountError(f"corpus file {path} does not exist")
    documents = []
    for number, row in read_jsonl_rows(path):
        if not isinstance(row, dict) or not isinstance(row.get(field), str):
            raise DraftcountError(f"{path}:{number} has no string field {field!r}")
        if row[field].strip():
            documents.append(Document(str(row.get("id", f"{path.name}:{number}")), row[field]))
    if not documents:
        raise DraftcountError(f"{path} holds no documents")
    return documents


def build_jsonl_corpus(out_dir: Path, path: Path, heldout_fraction: float, seed: int, field: str = "text",
                       max_train_bytes: int | None = None) -> dict:
    documents = read_text_jsonl(path, field)
    source = {"source": "jsonl", "path": str(path), "field": field}
    return split_and_write(out_dir, documents, heldout_fraction, seed, source, max_train_bytes)
