"""A GGUF checkpoint as a plain Hugging Face directory: read once by transformers' GGUF loader (which dequantises
every tensor), its state dict copied into a model of the same class built from the same config without the GGUF
quantisation entry (``save_pretrained`` refuses the GGUF-loaded model), saved as safetensors in the dtype asked
for, beside the tokenizer, its chat template, the generation config and ``draftcount.json`` (where it came from).
Every later job loads the directory like any checkpoint, in seconds, without the ``gguf`` package."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness.errors import DraftcountError
from harness.store.atomic import atomic_path
from harness.store.provenance import PROVENANCE

DTYPES = ("float32", "bfloat16", "float16")


def gguf_quantisation(path: Path) -> dict[str, Any]:
    """The file's quantisation as its header states it: the file type (``Q4_1``) and how many tensors are stored
    in each tensor type (``{"Q4_1": 210, "F32": 61, "Q8_0": 1}``)."""
    from gguf import GGUFReader, LlamaFileType

    reader = GGUFReader(path)
    field = reader.fields.get("general.file_type")
    file_type = LlamaFileType(int(field.contents())).name if field is not None else "unknown"
    label = file_type.removeprefix("MOSTLY_").removeprefix("ALL_")
    types = Counter(tensor.tensor_type.name for tensor in reader.tensors)
    return {"file_type": label, "tensor_types": dict(types.most_common())}


def quantisation_label(quantisation: dict[str, Any]) -> str:
    """``Q4_1 dequantised`` for a quantised file, ``F32`` for one stored unquantised."""
    label = quantisation["file_type"]
    return label if label in ("F32", "F16", "BF16") else f"{label} dequantised"


def load_gguf(path: Path):
    """(model, tokenizer) as transformers reads the GGUF file (weights dequantised to float32)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (ValueError, KeyError, ImportError) as error:
        raise DraftcountError(f"transformers cannot read {path.name}: {str(error).splitlines()[0]}") from None
    return model.eval(), tokenizer


def plain_copy(model, dtype: str):
    """A model of ``model``'s class and config minus its GGUF quantisation entry, holding its weights in ``dtype``."""
    import torch

    if dtype not in DTYPES:
        raise DraftcountError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    fields = {key: value for key, value in model.config.to_dict().items()
              if key not in ("quantization_config", "_name_or_path", "_model_name_or_path")}
    config = type(model.config).from_dict(fields)
    plain = type(model)(config)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.generation_config = model.generation_config
    return plain.to(getattr(torch, dtype)).eval()


def import_gguf(gguf: Path, out_dir: Path, dtype: str, source: dict[str, Any]) -> dict[str, Any]:
    """Convert ``gguf`` into the Hugging Face directory ``out_dir`` (written whole or not at all) and return its
    provenance: ``source`` (package, version, hashes) with the quantisation, the dtype and the parameter count."""
    started = time.perf_counter()
    quantisation = gguf_quantisation(gguf)
    model, tokenizer = load_gguf(gguf)
    loaded = time.perf_counter() - started
    plain = plain_copy(model, dtype)
    if not getattr(tokenizer, "chat_template", None):
        raise DraftcountError(f"{Path(gguf).name} carries no chat template (tokenizer.chat_template)")
    provenance = {
        "kind": "imported",
        "source": {**source, "file": Path(gguf).name, "quantisation": quantisation_label(quantisation),
                   "tensor_types": quantisation["tensor_types"], "dtype": dtype,
                   "architecture": type(plain).__name__,
                   "parameters": sum(parameter.numel() for parameter in plain.parameters())},
        "load_seconds": round(loaded, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with atomic_path(out_dir) as partial:
        plain.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        (partial / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    return provenance
