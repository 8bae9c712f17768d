"""DFlash drafter directories: z-lab's released layout, and ours (the same, plus our metadata).

A drafter is a directory (or a hub id) with ``config.json`` and ``model.safetensors``. The config holds the layers'
shape (Qwen3 fields), ``block_size`` and ``dflash_config`` (``mask_token_id``, ``target_layer_ids``, 0-based; without
them z-lab's default spacing over ``num_target_layers``). The weights are ``fc.weight``, ``hidden_norm.weight``,
``norm.weight`` and ``layers.<i>.{self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, mlp.{gate,up,down}_proj,
input_layernorm, post_attention_layernorm}.weight``; the embedding and LM head are the target's. Drafters trained
here without a mask token in the target's vocabulary add ``mask_embedding``, and with a draft vocabulary its
``d2t``/``t2d`` maps. A missing field, a missing or unexpected weight, a weight of the wrong shape or a drafter built
for another target stops with one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from transformers import LlamaConfig, PreTrainedModel

from harness.errors import DraftcountError
from harness.training.draft_vocab import DraftVocab
from harness.training.drafters import (
    DrafterFiles, check_target_fit, check_weights, head_config, init_linear_layers, read_drafter, write_drafter,
)
from methods.dflash.model import DFlashDrafter, default_target_layers

REQUIRED_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "block_size")
RELEASED_EXTRAS = ("embed_tokens.weight", "lm_head.weight")  # copies of the target's some releases carry: not read
# (a drafter whose config says own_embedding / own_lm_head reads its own)


def anchor_predicts(fields: dict) -> bool:
    """Whether the drafter drafts from every slot (DeepSpec's ``Qwen3DSparkModel``, for its DFlash and DSpark
    drafters) rather than from the mask slots alone (z-lab's); ours say so in ``anchor_predicts``."""
    if "anchor_predicts" in fields:
        return bool(fields["anchor_predicts"])
    return any("DSpark" in name for name in fields.get("architectures") or ())


def drafter_fields(fields: dict, target_layers: int, label: str) -> tuple[tuple[int, ...], int | None]:
    """(target_layer_ids, mask_token_id) from config.json's fields (``dflash_config`` or the top level; a layer
    id of -1 is the embedding output, as DeepSpec allows)."""
    missing = [name for name in REQUIRED_FIELDS if name not in fields]
    if missing:
        raise DraftcountError(f"{label}: config.json lacks {', '.join(missing)}")
    extra = {**fields, **(fields.get("dflash_config") or {})}
    layers = extra.get("target_layer_ids")
    if layers is None:
        layers = default_target_layers(int(extra.get("num_target_layers") or target_layers),
                                       int(fields["num_hidden_layers"]))
    if any(not -1 <= int(layer) < target_layers for layer in layers):
        raise DraftcountError(f"{label}: target layers {list(layers)} are not all in -1..{target_layers - 1} "
                              f"(the target has {target_layers} layers)")
    mask = extra.get("mask_token_id")
    return tuple(int(layer) for layer in layers), (None if mask is None else int(mask))


def read_backbone(source: str | Path, target: PreTrainedModel, method: str,
                  build: Callable[..., DFlashDrafter] = DFlashDrafter) -> tuple[DrafterFiles, DFlashDrafter]:
    """A drafter directory's files and its network, built (not loaded) for ``target`` by ``build(config,
    target_layer_ids, mask_token_id, target_hidden, anchor_predicts, draft_vocab)`` (a family extending the backbone
    reads its own fields from ``config``)."""
    files = read_drafter(source, method, meta_required=False)
    label = f"{method} drafter {files.directory}"
    fields = files.config_fields
    text = getattr(target.config, "text_config", None) or target.config
    layers, mask_token = drafter_fields(fields, int(text.num_hidden_layers), label)
    config = files.llama_config()
    embedding = target.get_input_embeddings().weight
    check_target_fit(label, int(config.hidden_size), int(fields.get("vocab_size") or embedding.shape[0]), target)
    if mask_token is not None and not 0 <= mask_token < embedding.shape[0]:
        raise DraftcountError(f"{label}: mask token {mask_token} is outside the target's vocabulary "
                              f"({embedding.shape[0]} tokens)")
    vocab = files.draft_vocab(int(embedding.shape[0]), label)
    return files, build(config, layers, mask_token, int(embedding.shape[1]), anchor_predicts(fields), vocab)


def load_weights(module: torch.nn.Module, files: DrafterFiles, label: str) -> None:
    """``files``' weights into ``module`` (the target's embedding and LM head, which some releases carry, left
    out); one line for a missing, unexpected or misshapen weight."""
    owned = {"embed_tokens.weight"} if getattr(module, "embed_tokens", None) is not None else set()
    owned |= {"lm_head.weight"} if getattr(module, "lm_head", None) is not None else set()
    state = {name: tensor for name, tensor in files.state.items() if name not in set(RELEASED_EXTRAS) - owned}
    check_weights(module, state, label)
    module.load_state_dict(state)


def load_drafter(source: str | Path, target: PreTrainedModel, method: str = "dflash") -> DFlashDrafter:
    """A DFlash drafter (z-lab's, DeepSpec's or trained here; ``method`` names the family whose metadata it may
    carry) for ``target``, in eval mode. A DSpark drafter's extra heads are refused (as unexpected weights)."""
    files, drafter = read_backbone(source, target, method)
    load_weights(drafter, files, f"{method} drafter {files.directory}")
    return drafter.eval()


def drafter_config(drafter: DFlashDrafter) -> LlamaConfig:
    """The config.json of a drafter, with ``dflash_config`` as z-lab writes it."""
    config = drafter.config
    config.dflash_config = {"mask_token_id": drafter.mask_token_id, "target_layer_ids": list(drafter.target_layer_ids)}
    config.anchor_predicts = drafter.anchor_predicts
    config.own_embedding, config.own_lm_head = drafter.embed_tokens is not None, drafter.lm_head is not None
    config.architectures = ["DFlashDraftModel"]
    return config


def save_drafter(drafter: DFlashDrafter, out_dir: Path, provenance: dict, method: str = "dflash",
                 meta: dict | None = None, config: LlamaConfig | None = None) -> None:
    """config.json (``config``, default ``drafter_config``) + model.safetensors in z-lab's layout, + our metadata
    (``method``, ``meta``, provenance)."""
    state = {name: tensor for name, tensor in drafter.state_dict().items()}
    write_drafter(out_dir, method, state, {"trainable_parameters": drafter.trainable_parameters(),
                                           "block_size": drafter.block_size, **(meta or {}), **provenance},
                  config or drafter_config(drafter), drafter.draft_vocab)


def new_drafter(target: PreTrainedModel, layers: int, block_size: int, target_layer_ids: tuple[int, ...],
                mask_token_id: int | None, seed: int, intermediate_size: int = 0,
                anchor_predicts: bool = False, own_embedding: bool = False, own_lm_head: bool = False,
                draft_vocab: DraftVocab | None = None) -> DFlashDrafter:
    """A fresh drafter shaped like the target's layers (``layers`` of them) over ``draft_vocab`` (default: the
    full vocabulary), initialised from ``seed``; with ``own_embedding`` / ``own_lm_head``, copies of the target's
    (its rows of the draft vocabulary) to train."""
    vocab, width = target.get_input_embeddings().weight.shape
    config = head_config(target.config, int(vocab))
    config.num_hidden_layers = layers
    config.block_size = block_size
    if intermediate_size:
        config.intermediate_size = intermediate_size
    config.own_embedding, config.own_lm_head = own_embedding, own_lm_head
    torch.manual_seed(seed)
    drafter = DFlashDrafter(config, target_layer_ids, mask_token_id, int(width), anchor_predicts, draft_vocab)
    init_linear_layers(drafter, std=0.02)
    if mask_token_id is None:
        torch.nn.init.normal_(drafter.mask_embedding, std=0.02)
    with torch.no_grad():
        if own_embedding:
            drafter.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
        if own_lm_head:
            drafter.lm_head.weight.copy_(drafter.draft_vocab.restrict(target.get_output_embeddings().weight.T).T)
    return drafter
