"""Reading the files a run or a training loads (weights, token streams, JSON metadata), each a one-line error
naming the file when it is corrupt or truncated, instead of the reader's traceback
(``SafetensorError: Error while deserializing header: ...``, ``UnpicklingError``, ``JSONDecodeError``)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from harness.errors import DraftcountError, first_line

UNREADABLE = (SafetensorError, pickle.UnpicklingError, EOFError, OSError, RuntimeError, ValueError)  # torch.load's
# errors on a truncated or garbled file vary with its damage (a cut zip archive is an OSError, garbage an
# UnpicklingError, an empty file an EOFError)


def corrupt(path: Path, what: str, error: BaseException) -> DraftcountError:
    return DraftcountError(f"{what} {path} is corrupt or truncated ({first_line(error)}); write or fetch it again")


def read_json(path: Path, what: str = "file") -> Any:
    """A JSON file; one line naming it when it does not parse."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DraftcountError(f"{what} {path} is not valid JSON ({first_line(error)})") from None


def load_weights(path: Path, what: str = "weights file") -> dict[str, torch.Tensor]:
    """The tensors of a ``.safetensors`` file or a ``torch.save``'d state dict, on the CPU; one line naming the
    file when it cannot be read."""
    try:
        if Path(path).suffix == ".safetensors":
            return load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=True)
    except UNREADABLE as error:
        raise corrupt(path, what, error) from None


def load_tensor(path: Path, what: str = "token stream") -> torch.Tensor:
    """A ``torch.save``'d tensor (a token stream); one line naming the file when it cannot be read."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except UNREADABLE as error:
        raise corrupt(path, what, error) from None


def check_safetensors(directory: Path, what: str = "model file") -> None:
    """Every ``*.safetensors`` file in ``directory`` opens: its header parses and the file covers what the header
    says (only the header is read). One line naming the first that does not."""
    for path in sorted(Path(directory).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except UNREADABLE as error:
            raise corrupt(path, what, error) from None
