"""Reading the workflow's config files, and reading and writing the JSON records a run keeps: no torch, so that
a script that only handles them (a poll of workflow/scripts/gpu_session.py, say) starts in a fraction of a second."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from harness.atomic import atomic_path
from harness.errors import DraftcountError


def merge(base: dict, update: dict) -> dict:
    """Deep merge, as Snakemake merges config files."""
    for key, value in update.items():
        base[key] = merge(dict(base[key]), value) if isinstance(value, dict) and isinstance(base.get(key), dict) \
            else value
    return base


def read_configs(paths: list[Path]) -> dict:
    """The workflow config files ``paths`` (YAML), merged in order."""
    config: dict = {}
    for path in paths:
        if not path.is_file():
            raise DraftcountError(f"no config file {path}")
        merge(config, yaml.safe_load(path.read_text()) or {})
    return config


def read_json_object(path: Path) -> dict:
    """The JSON object in ``path``; empty when there is none or it is unreadable (a run killed while writing)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def write_json_object(path: Path, value: dict) -> None:
    """``value`` as JSON in ``path``, replacing it only once written whole (``atomic_path``)."""
    with atomic_path(path) as partial:
        partial.write_text(json.dumps(value, indent=1, default=str) + "\n")
