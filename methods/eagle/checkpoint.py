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

Either layout may carry ``d2t``/``t2d`` (an EAGLE-1/2 head trained here with ``draft_vocab``: the target LM head's
rows of those tokens draft); they must map the target's vocabulary (``harness.training.draft_vocab``).

A layout this module does not know, a missing or unexpected weight, or a weight of the wrong shape stops with one
line naming them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, PreTrainedModel

from harness.backend.models import text_config
from harness.errors import DraftcountError
from harness.store.atomic import atomic_path
from harness.training.draft_vocab import DraftVocab
from harness.training.drafters import DrafterFiles, check_weights, read_drafter, write_drafter
from harness.training.features import FeatureSpec, default_fusion_layers
from methods.eagle.head import EagleHead
from methods.eagle.head3 import Eagle3Head

CONFIG_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")  # cnets.py reads them
OPTIONAL_WEIGHTS = frozenset({"embed_tokens.weight"})  # the target's embedding stands in


def checkpoint_layout(state: dict[str, torch.Tensor], directory: Path) -> str:
    if any(key.startswith("midlayer.") for key in state):
        return "eagle3"
    if any(key.startswith("layers.0.") for key in state):
        return "eagle"
    raise DraftcountError(f"drafter {directory}: not an EAGLE head (neither 'midlayer.*' (EAGLE-3) nor 'layers.0.*' "
                          f"(EAGLE-1/2) weights; it has {', '.join(sorted(state)[:6])}{', ...' if len(state) > 6 else ''})")


def released_config(files: DrafterFiles) -> LlamaConfig:
    """The head's config.json, with the fields the EAGLE authors' code reads."""
    config = files.llama_config()  # Qwen2 heads say qwen2: the head is a Llama layer either way
    missing = [name for name in CONFIG_FIELDS if name not in files.config_fields]
    if missing:
        raise DraftcountError(f"drafter {files.directory}: config.json lacks {', '.join(missing)}")
    return config


def head_features(meta: dict, layout: str, target_layers: int) -> FeatureSpec:
    if meta.get("feature_layers"):
        layers = tuple(layer if layer == "last" else int(layer) for layer in meta["feature_layers"])
        return FeatureSpec(meta.get("fusion", "none"), layers)
    if layout == "eagle3":
        return FeatureSpec("eagle3", default_fusion_layers(target_layers))
    return FeatureSpec("none", ("last",))


def build_head(layout: str, config: LlamaConfig, files: DrafterFiles, features: FeatureSpec,
               target: PreTrainedModel, label: str) -> EagleHead | Eagle3Head:
    embedding = target.get_input_embeddings().weight
    vocab, width = int(embedding.shape[0]), int(embedding.shape[1])
    state = files.state
    if layout == "eagle3":
        target_hidden = int(getattr(config, "target_hidden_size", None) or config.hidden_size)
        if target_hidden != width:
            raise DraftcountError(f"{label}: built for a target {target_hidden} wide; the target is {width}")
        if config.vocab_size != vocab:
            raise DraftcountError(f"{label}: built for a {config.vocab_size}-token vocabulary; the target has {vocab}")
        return Eagle3Head(config, features, width, vocab, eagle3_vocab(files, vocab, label))
    if config.hidden_size != width:
        raise DraftcountError(f"{label}: {config.hidden_size} wide; the target is {width}")
    config.vocab_size = vocab
    residuals = int(state["step_residuals"].shape[0]) if "step_residuals" in state else 0
    return EagleHead(config, features, fc_bias="fc.bias" in state, parallel="mask_embedding" in state,
                     residual_steps=residuals, draft_vocab=files.draft_vocab(vocab, label))


def eagle3_vocab(files: DrafterFiles, vocab: int, label: str) -> DraftVocab:
    """An EAGLE-3 head's draft vocabulary: its maps (the identity when it has none), of its LM head's size."""
    draft = files.draft_vocab(vocab, label)
    rows = int(files.state["lm_head.weight"].shape[0]) if "lm_head.weight" in files.state else draft.size
    if rows != draft.size:
        raise DraftcountError(f"{label}: its LM head has {rows} rows; its d2t/t2d map {draft.size} tokens")
    return draft


def load_head(source: str | Path, target: PreTrainedModel) -> EagleHead | Eagle3Head:
    """Load an EAGLE-1/2 or EAGLE-3 head (released or trained here) for ``target``, in eval mode."""
    files = read_drafter(source, "eagle", meta_required=False)
    directory, state = files.directory, files.state
    config = released_config(files)
    layout = checkpoint_layout(state, directory)
    label = f"{'EAGLE-3' if layout == 'eagle3' else 'EAGLE-1/2'} head {directory}"
    if layout == "eagle":
        state.pop("lm_head.weight", None)  # some exports carry the target's LM head; the target's own is used
    features = head_features(files.meta, layout, int(text_config(target.config).num_hidden_layers))
    head = build_head(layout, config, files, features, target, label)
    check_weights(head, state, label, OPTIONAL_WEIGHTS)
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
    state = dict(head.state_dict())
    if isinstance(head, Eagle3Head):
        state.pop("embed_tokens.weight")  # the official EAGLE-3 heads take the target's
        state.update(head.draft_vocab.maps())  # and always carry their maps
    if not official_bin:
        meta = {"fusion": head.features.fusion, "feature_layers": list(head.features.layers),
                "trainable_parameters": head.trainable_parameters(), **provenance}
        write_drafter(out_dir, "eagle", state, meta, head.config, head.draft_vocab)
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    head.config.save_pretrained(out_dir)
    with atomic_path(out_dir / "pytorch_model.bin") as partial:
        torch.save({name: tensor.detach().cpu().contiguous() for name, tensor in state.items()}, partial)
