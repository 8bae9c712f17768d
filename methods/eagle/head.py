"""The EAGLE draft head: [token embedding; target feature] -> linear -> one decoder layer -> target LM head.

Parameter names follow the official EAGLE-1/2 checkpoints (``fc.weight``,
``fc.bias``, ``layers.0.self_attn.q_proj.weight``, ..., ``embed_tokens.weight``;
the first layer has no input norm, and there is no final norm), so a head
the EAGLE authors released loads as is: a directory with their ``config.json``
(a one-layer LlamaConfig) and ``pytorch_model.bin`` or ``model.safetensors``.
Heads trained here use the same layout plus ``draftcount_drafter.json`` naming
the feature fusion (``none``: the target's last hidden state; ``eagle3``: a low,
middle and high layer concatenated and projected by ``fuse``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from harness.store.atomic import atomic_path
from harness.training.drafters import META_FILE, head_config, init_linear_layers
from harness.training.features import FeatureSpec
from harness.errors import DraftcountError
from harness.backend.kv_cache import cache_argument
from harness.backend.models import ModelCost

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class EagleHead(nn.Module):
    """The draft head (see the module docstring). The LM head is the target's, passed to ``logits``."""

    def __init__(self, config: LlamaConfig, features: FeatureSpec, fc_bias: bool = True) -> None:
        super().__init__()
        config._attn_implementation = "sdpa"
        self.config = config
        self.features = features
        hidden = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, hidden)
        self.embed_tokens.weight.requires_grad_(False)
        self.fuse = nn.Linear(3 * hidden, hidden, bias=False) if features.fusion == "eagle3" else None
        self.fc = nn.Linear(2 * hidden, hidden, bias=fc_bias)
        layer = LlamaDecoderLayer(config, layer_idx=0)
        layer.input_layernorm = nn.Identity()  # EAGLE's first layer has no input norm
        self.layers = nn.ModuleList([layer])
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def input_features(self, rows: list[torch.Tensor]) -> torch.Tensor:
        """The head's feature input from the target layers named by ``features``."""
        return self.fuse(torch.cat(rows, dim=-1)) if self.fuse is not None else rows[0]

    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cache: DynamicCache | None = None, attention_bias: torch.Tensor | None = None) -> torch.Tensor:
        """(B, q, H) predicted next features for pairs (feature at p, token at p + 1) at positions p."""
        embedded = self.embed_tokens(input_ids).to(features.dtype)
        hidden = self.fc(torch.cat([embedded, features], dim=-1))
        rotary = self.rotary_emb(hidden, position_ids)
        out = self.layers[0](hidden, attention_mask=attention_bias, position_ids=position_ids,
                             use_cache=cache is not None, position_embeddings=rotary,
                             **cache_argument(self.layers[0], cache))
        return out[0] if isinstance(out, tuple) else out

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def cost(self, lm_head_params: int) -> ModelCost:
        body = sum(p.numel() for name, p in self.named_parameters() if not name.startswith("embed_tokens"))
        return ModelCost(body_params=body, head_params=lm_head_params, num_layers=1,
                         attention_width=self.config.num_attention_heads * self.config.head_dim)


def new_head(target_config, vocab_size: int, embedding: torch.Tensor, features: FeatureSpec, seed: int) -> EagleHead:
    """A freshly initialised head whose (frozen) token embedding is the target's."""
    torch.manual_seed(seed)
    head = EagleHead(head_config(target_config, vocab_size), features)
    init_linear_layers(head, head.config.initializer_range)
    with torch.no_grad():
        head.embed_tokens.weight.copy_(embedding)
    return head


def save_head(head: EagleHead, out_dir: Path, provenance: dict, official_bin: bool = False) -> None:
    """config.json + weights (+ our metadata unless ``official_bin``: the official EAGLE-1/2 layout)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().cpu().contiguous() for name, tensor in head.state_dict().items()}
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


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        path = directory / name
        if path.is_file():
            state = load_file(str(path)) if name.endswith(".safetensors") else torch.load(
                path, map_location="cpu", weights_only=True)
            return {key.removeprefix("model."): value for key, value in state.items()}
    raise DraftcountError(f"drafter directory {directory} holds no weights ({' or '.join(WEIGHT_FILES)})")


def load_head(directory: Path, target_hidden: int, target_vocab: int, target_embedding: torch.Tensor) -> EagleHead:
    """Load a head trained here or released by the EAGLE authors (official layout), checked against the target."""
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise DraftcountError(f"drafter directory {directory} holds no config.json")
    meta = json.loads((directory / META_FILE).read_text()) if (directory / META_FILE).is_file() else {}
    if meta.get("method", "eagle") != "eagle":
        raise DraftcountError(f"drafter {directory} was trained for method {meta['method']!r}, not 'eagle'")
    features = FeatureSpec(meta.get("fusion", "none"), tuple(meta.get("feature_layers", ["last"])))
    config = LlamaConfig.from_pretrained(directory)
    if config.hidden_size != target_hidden:
        raise DraftcountError(f"EAGLE head {directory} is {config.hidden_size} wide; the target is {target_hidden}")
    state = _read_weights(directory)
    state.pop("lm_head.weight", None)  # some exports carry the target's LM head; the target's own is used
    config.vocab_size = target_vocab
    head = EagleHead(config, features, fc_bias="fc.bias" in state)
    embedding = state.pop("embed_tokens.weight", None)
    if embedding is not None and tuple(embedding.shape) != (target_vocab, target_hidden):
        raise DraftcountError(
            f"EAGLE head {directory}: embedding of shape {tuple(embedding.shape)} does not fit the target's "
            f"vocabulary ({target_vocab}) and width ({target_hidden})")
    state["embed_tokens.weight"] = embedding if embedding is not None else target_embedding.detach().cpu()
    missing, unexpected = head.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise DraftcountError(f"EAGLE head {directory}: missing weights {sorted(missing)[:5]}, "
                              f"unexpected weights {sorted(unexpected)[:5]}")
    return head.eval()
