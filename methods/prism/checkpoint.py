"""PRISM drafter directories: ``config.json`` (the one-layer Llama shape of every module), ``model.safetensors``
(``blocks.{m}.fc.*``, ``blocks.{m}.layer.*``; the token embedding is the target's and is not stored) and
``draftcount_drafter.json`` (method ``prism``, the step-to-module map, provenance). Reading reuses the EAGLE
checkpoint helpers, so a missing, unexpected or misshapen weight stops with one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file
from transformers import PreTrainedModel

from harness.errors import DraftcountError
from harness.store.atomic import atomic_path
from harness.training.drafters import META_FILE
from methods.eagle.checkpoint import check_weights, drafter_directory, read_config, read_weights
from methods.prism.head import PrismHead


def save_prism(head: PrismHead, out_dir: Path, provenance: dict) -> None:
    """Write ``head`` (without the target's embedding) and its metadata to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in head.state_dict().items()
             if name != "embed_tokens.weight"}
    head.config.save_pretrained(out_dir)
    with atomic_path(out_dir / "model.safetensors") as partial:
        save_file(state, str(partial))
    meta = {"method": "prism", "fusion": "none", "feature_layers": ["last"], "step_modules": list(head.step_modules),
            "modules": head.module_count, "trainable_parameters": head.trainable_parameters(),
            "step_parameters": head.step_parameters(), **provenance}
    with atomic_path(out_dir / META_FILE) as partial:
        partial.write_text(json.dumps(meta, indent=2) + "\n")


def read_meta(directory: Path) -> dict:
    path = directory / META_FILE
    if not path.is_file():
        raise DraftcountError(f"drafter {directory} has no {META_FILE}: not a PRISM drafter (python -m harness train "
                              f"--method prism writes one)")
    meta = json.loads(path.read_text())
    if meta.get("method") != "prism":
        raise DraftcountError(f"drafter {directory} was trained for method {meta.get('method')!r}, not 'prism'")
    return meta


def load_prism(source: str | Path, target: PreTrainedModel) -> PrismHead:
    """Load a PRISM drafter trained here for ``target``, in eval mode."""
    directory = drafter_directory(source)
    meta = read_meta(directory)
    config = read_config(directory)
    embedding = target.get_input_embeddings().weight.detach().cpu()
    label = f"PRISM drafter {directory}"
    if config.hidden_size != embedding.shape[1]:
        raise DraftcountError(f"{label}: {config.hidden_size} wide; the target is {embedding.shape[1]}")
    if config.vocab_size != embedding.shape[0]:
        raise DraftcountError(f"{label}: built for a {config.vocab_size}-token vocabulary; the target has "
                              f"{embedding.shape[0]}")
    head = PrismHead(config, tuple(meta.get("step_modules", ())))
    state = read_weights(directory)
    check_weights(head, state, label)
    state["embed_tokens.weight"] = embedding
    head.load_state_dict(state)
    return head.eval()
