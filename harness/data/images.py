"""A prompt's image for a vision-language target (issue 49): its pixel values from the target's own image
processor, its placeholder tokens in the prompt (LLaVA's: one image token per patch, first in the prompt), and its
name and hash in the records. A prompt file names an image by path (``"image"`` in a question record, relative to
the file's folder)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import torch

from harness.errors import DraftcountError, first_line


@functools.lru_cache(maxsize=4)
def image_processor(location: str) -> Any:
    """The image processor saved with the model at ``location`` (its preprocessor_config.json)."""
    from transformers import AutoImageProcessor

    try:
        return AutoImageProcessor.from_pretrained(location)
    except (OSError, ValueError) as error:
        raise DraftcountError(f"the target at {location} has no image processor to read a prompt's image: "
                              f"{first_line(error)}")


def image_inputs(location: str, path: str) -> dict[str, torch.Tensor]:
    """The prefill inputs of the image at ``path`` for the model at ``location``: ``{"pixel_values": ...}``."""
    from PIL import Image

    if not Path(path).is_file():
        raise DraftcountError(f"image {path} does not exist")
    with Image.open(path) as image:
        pixels = image_processor(location)(images=image.convert("RGB"), return_tensors="pt")["pixel_values"]
    return {"pixel_values": pixels}


def image_tokens(config: Any) -> tuple[int, int]:
    """A vision-language target's image placeholder token and how many of them stand for one image."""
    token = getattr(config, "image_token_index", None)
    count = getattr(config, "image_seq_length", None)
    if token is None or not count:
        raise DraftcountError("a prompt with an image needs a vision-language target (a LLaVA-style config with "
                              "image_token_index and image_seq_length); this target has none")
    return int(token), int(count)


def with_image(ids: list[int], token: int, count: int, bos: int | None) -> list[int]:
    """``ids`` with the image's ``count`` placeholder tokens first (after a leading BOS), as LLaVA's prompts put it."""
    head = 1 if ids and bos is not None and ids[0] == bos else 0
    return [*ids[:head], *[token] * count, *ids[head:]]


def image_record(path: str) -> dict[str, str]:
    """What a record says of the image a generation read: its file name and the SHA-256 of its bytes (hashed once
    per file version: its size and modification time)."""
    stat = Path(path).stat()
    return dict(_image_record(path, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=1024)
def _image_record(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, str], ...]:
    return (("name", Path(path).name), ("sha256", hashlib.sha256(Path(path).read_bytes()).hexdigest()))
