"""EAGLE head checkpoints: the layouts the EAGLE authors release, and ours.

A head is a directory (or a hub id) with ``config.json`` and ``model.safetensors`` or ``pytorch_model.bin``;
heads trained here add ``draftcount_drafter.json`` (fusion, feature layers, provenance). The layout is read from
the weights' names:

- ``eagle`` (EAGLE-1/2, their ``cnets1.py``): ``fc.*`` over [embedding; feature], ``layers.0.*``; Vicuna/LLaMA-2
  heads carry ``fc.bias`` and ``embed_tokens.weight``, LLaMA-3 heads say ``bias: false`` (GQA, rope_theta 5e5),
  Qwen2 heads say ``qkv_bias: true``. The target's LM head drafts.
- ``eagle3`` (EAGLE-3, their ``cnets.py``): ``fc.weight`` over three target layers, ``midlayer.*``, ``norm``, its
  own ``lm_head`` over ``draft_vocab_size`` tokens and the ``d2t``/``t2d`` vocabulary maps. Its features are the
  target layers EAGLE-3 takes (``harness.training.features.default_fusion_layers``), unless our metadata names others.

A layout this module does not know, a missing or unexpected weight, or a weight of the wrong shape stops with one
line naming them.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig, PreTrainedModel

from harness.store.hub import drafter_snapshot, is_hub_id
from harness.errors import DraftcountError
from harness.store.atomic import atomic_path
from harness.training.drafters import META_FILE
from harness.training.features import FeatureSpec, default_fusion_layers
from methods.eagle.head import EagleHead
from methods.eagle.head3 import Eagle3Head

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
CONFIG_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")  # cnets.py reads them
OPTIONAL_WEIGHTS = {"embed_tokens.weight", "d2t", "t2d"}  # the target's embedding / identity maps stand in


def drafter_directory(source: str | Path) -> Path:
    """A local head directory, or a hub id's files fetched into the hub cache."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if is_hub_id(str(source)):
        return drafter_snapshot(str(source))
    raise DraftcountError(f"drafter directory {source} does not exist")


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        path = directory / name
        if path.is_file():
            state = load_file(str(path)) if name.endswith(".safetensors") else torch.load(
                path, map_location="cpu", weights_only=True)
            return {key.removeprefix("model."): value for key, value in state.items()}
    raise DraftcountError(f"drafter directory {directory} holds no weights ({' or '.join(WEIGHT_FILES)})")


def checkpoint_layout(state: dict[str, torch.Tensor], directory: Path) -> str:
    if any(key.startswith("midlayer.") for key in state):
        return "eagle3"
    if any(key.startswith("layers.0.") for key in state):
        return "eagle"
    raise DraftcountError(f"drafter {directory}: not an EAGLE head (neither 'midlayer.*' (EAGLE-3) nor 'layers.0.*' "
                          f"(EAGLE-1/2) weights; it has {', '.join(sorted(state)[:6])}{', ...' if len(state) > 6 else ''})")


def read_config(directory: Path) -> LlamaConfig:
    path = directory / "config.json"
    if not path.is_file():
        raise DraftcountError(f"drafter directory {directory} holds no config.json")
    fields = json.loads(path.read_text())
    missing = [name for name in CONFIG_FIELDS if name not in fields]
    if missing:
        raise DraftcountError(f"drafter {directory}: config.json lacks {', '.join(missing)}")
    fields.pop("model_type", None)  # Qwen2 heads say qwen2: the head is a Llama layer either way
    return LlamaConfig(**fields)


def check_weights(head: nn.Module, state: dict[str, torch.Tensor], label: str) -> None:
    """Every weight the head needs is there, nothing else is, and every shape fits (one line otherwise)."""
    expected = {name: tuple(tensor.shape) for name, tensor in head.state_dict().items()}
    missing = sorted(set(expected) - set(state) - OPTIONAL_WEIGHTS)
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        parts = ([f"missing weights {', '.join(missing[:6])}"] if missing else []) + (
            [f"unexpected weights {', '.join(unexpected[:6])}"] if unexpected else [])
        raise DraftcountError(f"{label}: {'; '.join(parts)}")
    wrong = [f"{name} {tuple(state[name].shape)} (expected {expected[name]})"
             for name in sorted(state) if tuple(state[name].shape) != expected[name]]
    if wrong:
        raise DraftcountError(f"{label}: weights of the wrong shape: {', '.join(wrong[:4])}")


def head_features(meta: dict, layout: str, target_layers: int) -> FeatureSpec:
    if meta.get("feature_layers"):
        layers = tuple(layer if layer == "last" else int(layer) for layer in meta["feature_layers"])
        return FeatureSpec(meta.get("fusion", "none"), layers)
    if layout == "eagle3":
        return FeatureSpec("eagle3", default_fusion_layers(target_layers))
    return FeatureSpec("none", ("last",))


def build_head(layout: str, config: LlamaConfig, state: dict[str, torch.Tensor], features: FeatureSpec,
               target: PreTrainedModel, label: str) -> EagleHead | Eagle3Head:
    embedding = target.get_input_embeddings().weight
    vocab, width = int(embedding.shape[0]), int(embedding.shape[1])
    if layout == "eagle3":
        target_hidden = int(getattr(config, "target_hidden_size", None) or config.hidden_size)
        if target_hidden != width:
            raise DraftcountError(f"{label}: built for a target {target_hidden} wide; the target is {width}")
        if config.vocab_size != vocab:
            raise DraftcountError(f"{label}: built for a {config.vocab_size}-token vocabulary; the target has {vocab}")
        return Eagle3Head(config, features, width, vocab)
    if config.hidden_size != width:
        raise DraftcountError(f"{label}: {config.hidden_size} wide; the target is {width}")
    config.vocab_size = vocab
    return EagleHead(config, features, fc_bias="fc.bias" in state)


def load_head(source: str | Path, target: PreTrainedModel) -> EagleHead | Eagle3Head:
    """Load an EAGLE-1/2 or EAGLE-3 head (released or trained here) for ``target``, in eval mode."""
    directory = drafter_directory(source)
    meta = json.loads((directory / META_FILE).read_text()) if (directory / META_FILE).is_file() else {}
    if meta.get("method", "eagle") != "eagle":
        raise DraftcountError(f"drafter {directory} was trained for method {meta['method']!r}, not 'eagle'")
    config = read_config(directory)
    state = read_weights(directory)
    layout = checkpoint_layout(state, directory)
    label = f"{'EAGLE-3' if layout == 'eagle3' else 'EAGLE-1/2'} head {directory}"
    if layout == "eagle":
        state.pop("lm_head.weight", None)  # some exports carry the target's LM head; the target's own is used
    features = head_features(meta, layout, int(target.config.num_hidden_layers))
    head = build_head(layout, config, state, features, target, label)
    check_weights(head, state, label)
    embedding = target.get_input_embeddings().weight.detach().cpu()
    if "embed_tokens.weight" not in state:
        if tuple(embedding.shape) != tuple(head.embed_tokens.weight.shape):
            raise DraftcountError(f"{label}: has no embedding and the target's {tuple(embedding.shape)} does not fit")
        state["embed_tokens.weight"] = embedding
    head.load_state_dict(state, strict=False)
    return head.eval()


def save_head(head: EagleHead | Eagle3Head, out_dir: Path, provenance: dict, official_bin: bool = False) -> None:
    """config.json + weights in the official layout of the head's kind (+ our metadata unless ``official_bin``,
    which writes exactly what the EAGLE authors release: ``pytorch_model.bin`` and the config)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in head.state_dict().items()}
    if isinstance(head, Eagle3Head):
        state.pop("embed_tokens.weight")  # the official EAGLE-3 heads take the target's
    head.config.save_pretrained(out_dir)
    if official_bin:
        with atomic_path(out_dir / "pytorch_model.bin") as partial:
            torch.save(state, partial)
        return
    with atomic_path(out_dir / "model.safetensors") as partial:
        save_file(state, str(partial))
    meta = {"method": "eagle", "fusion": head.features.fusion, "feature_layers": list(head.features.layers),
            "trainable_parameters": head.trainable_parameters(), **provenance}
    with atomic_path(out_dir / META_FILE) as partial:
        partial.write_text(json.dumps(meta, indent=2) + "\n")
