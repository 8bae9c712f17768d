"""Model sources: a local directory or a Hugging Face hub id (``owner/name``), and fetching a hub id's files.

The workflow and the loaders share one rule for telling them apart, so a hub id never becomes a missing file
input of a rule and a misspelt local path never becomes a hub request.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import DraftcountError, first_line


def is_hub_id(source: str) -> bool:
    """``owner/name`` (or a bare ``name``) that is not an existing path and does not look like one."""
    if not source or Path(source).expanduser().exists() or source.startswith((".", "/", "~")):
        return False
    return source.count("/") <= 1 and not source.endswith("/")


MODEL_FILES = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.tiktoken", "*.txt"]  # weights, config, tokenizer
DRAFTER_FILES = ["*.json", "*.safetensors", "*.bin"]  # EAGLE heads ship pytorch_model.bin or model.safetensors


def hub_snapshot(repo_id: str, patterns: list[str]) -> Path:
    """A local copy of ``repo_id``'s files matching ``patterns`` (the hub cache; downloaded when missing).

    Offline (``HF_HUB_OFFLINE=1`` or no network) it uses what the cache holds, or stops with one line."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError:  # pragma: no cover - transformers depends on huggingface_hub
        raise DraftcountError("hub ids need the huggingface_hub package") from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except LocalEntryNotFoundError:
        raise DraftcountError(f"'{repo_id}' is not in the local hub cache and the hub cannot be reached "
                              "(offline); download it once online, or give a local directory") from None
    except RepositoryNotFoundError:
        raise DraftcountError(f"hub id '{repo_id}' does not exist (or needs a token: huggingface-cli login)") from None
    except (HfHubHTTPError, OSError, ValueError) as error:
        raise DraftcountError(f"could not fetch '{repo_id}' from the hub: {first_line(error)}") from None


def model_snapshot(repo_id: str) -> Path:
    """A model's files from the hub: safetensors weights, or ``*.bin`` for a model that has none."""
    snapshot = hub_snapshot(repo_id, MODEL_FILES)
    if not any(snapshot.rglob("*.safetensors")):
        snapshot = hub_snapshot(repo_id, [*MODEL_FILES, "*.bin"])
    return snapshot


def drafter_snapshot(repo_id: str) -> Path:
    """A drafter's (an EAGLE head's) files from the hub: its config, weights and our metadata if it has any."""
    return hub_snapshot(repo_id, DRAFTER_FILES)


def link_snapshot(repo_id: str, snapshot: Path, out_dir: Path) -> Path:
    """``out_dir`` holding a link to every file of ``repo_id``'s ``snapshot`` (no second copy of the weights): a
    local directory the workflow's rules take as input like any other model directory."""
    files = [path for path in snapshot.rglob("*") if path.is_file()]
    if not files:
        raise DraftcountError(f"hub id '{repo_id}' holds no files to use")
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in files:
        link = out_dir / path.relative_to(snapshot)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path.resolve())
    return out_dir
