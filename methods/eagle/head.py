"""The EAGLE-1/2 draft head: [token embedding; target feature] -> linear -> one decoder layer -> target LM head.
With a draft vocabulary (``draft_vocab``, ``harness.training.draft_vocab``) its logits are the target LM head's rows
of those N tokens, in draft ids.

Parameter names follow the official EAGLE-1/2 checkpoints (their ``eagle/model/cnets1.py``: ``fc.weight``,
``fc.bias`` unless the config says ``bias: false``, ``layers.0.self_attn.q_proj.weight``, ...,
``embed_tokens.weight``; the first layer has no input norm, there is no final norm, and a Qwen2-family head's
config sets ``qkv_bias``: biases on q/k/v, none on o). ``methods.eagle.checkpoint`` reads and writes them; the
EAGLE-3 layout is ``methods.eagle.head3``.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from harness.training.draft_vocab import DraftVocab
from harness.training.drafters import head_config, init_linear_layers
from harness.training.features import FeatureSpec
from harness.backend.kv_cache import cache_argument
from harness.backend.models import ModelCost
from methods.eagle.head3 import Eagle3Head


def head_decoder_layer(config: LlamaConfig) -> LlamaDecoderLayer:
    """EAGLE-1/2's decoder layer: layer 0 of the head's one-layer KV cache, no input norm, q/k/v biases for a
    Qwen2-family head (``qkv_bias``)."""
    layer = LlamaDecoderLayer(config, layer_idx=0)
    layer.input_layernorm = nn.Identity()  # EAGLE's first layer has no input norm
    if getattr(config, "qkv_bias", False):
        add_qkv_biases(layer)
    return layer


def add_qkv_biases(layer: LlamaDecoderLayer) -> None:
    """Make ``layer`` a Qwen2-family layer: biases on q/k/v, none on o_proj."""
    for name in ("q_proj", "k_proj", "v_proj"):
        old = getattr(layer.self_attn, name)
        setattr(layer.self_attn, name, nn.Linear(old.in_features, old.out_features, bias=True))


def fused_layer_forward(embed_tokens: nn.Module, rotary_emb: nn.Module, fc: nn.Module, layer: nn.Module,
                        features: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor,
                        cache: DynamicCache | None, attention_bias: torch.Tensor | None,
                        mask_inputs: tuple[torch.Tensor, torch.Tensor, int] | None = None) -> torch.Tensor:
    """EAGLE-1/2's step: fc([embedding of the token at p + 1; feature at p]), then ``layer`` over ``cache``. With
    ``mask_inputs`` (embedding, feature, m) the last m slots read that learned embedding and feature instead of
    theirs (P-EAGLE's mask slots)."""
    embedded = embed_tokens(input_ids).to(features.dtype)
    if mask_inputs is not None:
        embedding, feature, masks = mask_inputs
        keep = embedded.shape[-2] - masks
        embedded = torch.cat([embedded[..., :keep, :],
                              embedding.to(features.dtype).expand_as(embedded[..., keep:, :])], dim=-2)
        features = torch.cat([features[..., :keep, :],
                              feature.to(features.dtype).expand_as(features[..., keep:, :])], dim=-2)
    hidden = fc(torch.cat([embedded, features], dim=-1))
    rotary = rotary_emb(hidden, position_ids)
    out = layer(hidden, attention_mask=attention_bias, position_ids=position_ids, use_cache=cache is not None,
                position_embeddings=rotary, **cache_argument(layer, cache))
    return out[0] if isinstance(out, tuple) else out


class EagleHead(nn.Module):
    """The draft head (see the module docstring). The LM head is the target's, passed to ``logits``."""

    def __init__(self, config: LlamaConfig, features: FeatureSpec, fc_bias: bool = True,
                 parallel: bool = False, residual_steps: int = 0, draft_vocab: DraftVocab | None = None) -> None:
        super().__init__()
        config._attn_implementation = "sdpa"
        self.config = config
        self.features = features
        self.draft_vocab = draft_vocab or DraftVocab(config.vocab_size)
        hidden = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, hidden)
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(2 * hidden, hidden, bias=fc_bias)
        self.layers = nn.ModuleList([head_decoder_layer(config)])
        self.rotary_emb = LlamaRotaryEmbedding(config)
        if parallel:
            self.enable_parallel()
        if residual_steps:
            self.enable_step_residuals(residual_steps)

    @property
    def residual_steps(self) -> int:
        """How many step-dependent residuals the head adds to fed-back features (HiViS v2; 0: none)."""
        return int(self.step_residuals.shape[0]) if hasattr(self, "step_residuals") else 0

    def enable_step_residuals(self, count: int) -> None:
        """HiViS v2's step-dependent bias-correction residuals: one learned vector per fed-back step (started at 0),
        added to the predicted features the head reads at draft step 2, 3, ... (the last one repeats)."""
        weight = self.embed_tokens.weight
        self.step_residuals = nn.Parameter(torch.zeros(count, self.config.hidden_size, dtype=weight.dtype,
                                                       device=weight.device))
        self.config.step_residuals = count

    def residual_index(self, step: int) -> int | None:
        """Which residual corrects the features fed at draft ``step`` (1: the catch-up on true features, none)."""
        if step < 2 or not self.residual_steps:
            return None
        return min(step - 2, self.residual_steps - 1)

    @property
    def parallel(self) -> bool:
        """Whether the head has P-EAGLE's mask inputs (a learned token embedding and feature for mask slots)."""
        return hasattr(self, "mask_embedding")

    def enable_parallel(self) -> None:
        """Add P-EAGLE's mask inputs, started at the mean token embedding and a zero feature (a head trained
        without them keeps its weights)."""
        if self.parallel:
            return
        weight = self.embed_tokens.weight
        self.mask_embedding = nn.Parameter(weight.detach().float().mean(0).to(weight.dtype))
        self.mask_feature = nn.Parameter(torch.zeros(self.config.hidden_size, dtype=weight.dtype,
                                                     device=weight.device))
        self.config.parallel_drafting = True

    def input_features(self, rows: list[torch.Tensor]) -> torch.Tensor:
        """The head's feature input: the one target layer named by ``features``."""
        return rows[0]

    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cache: DynamicCache | None = None, attention_bias: torch.Tensor | None = None,
                masks: int = 0, step: int = 1) -> torch.Tensor:
        """(B, q, H) predicted next features for pairs (feature at p, token at p + 1) at positions p; the last
        ``masks`` slots are P-EAGLE's mask slots (their feature and token inputs are ignored); at draft ``step``
        >= 2 a head with step residuals (HiViS v2) corrects the fed-back features by that step's residual."""
        index = self.residual_index(step)
        if index is not None:
            features = features + self.step_residuals[index].to(features.dtype)
        mask_inputs = (self.mask_embedding, self.mask_feature, masks) if masks else None
        return fused_layer_forward(self.embed_tokens, self.rotary_emb, self.fc, self.layers[0], features, input_ids,
                                   position_ids, cache, attention_bias, mask_inputs)

    def logits(self, hidden: torch.Tensor, target_lm_head: nn.Module) -> torch.Tensor:
        """EAGLE-1/2 heads draft through the target's own LM head (its draft vocabulary's rows: draft ids)."""
        return self.draft_vocab.logits(hidden, target_lm_head)

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def cost(self, lm_head_params: int) -> ModelCost:
        body = sum(p.numel() for name, p in self.named_parameters()
                   if not name.startswith(("embed_tokens", "mask_", "step_residuals")))
        return ModelCost(body_params=body, head_params=self.draft_vocab.head_params(lm_head_params), num_layers=1,
                         attention_width=self.config.num_attention_heads * self.config.head_dim)


def new_head(target: nn.Module, features: FeatureSpec, seed: int, draft_vocab: DraftVocab | None = None) -> nn.Module:
    """A freshly initialised head for ``target`` (a causal LM): EAGLE-1/2's for fusion ``none``, EAGLE-3's (its LM
    head over the draft vocabulary, the full one by default, and its norm started from the target's) for
    ``eagle3``. The token embedding is the target's, frozen."""
    torch.manual_seed(seed)
    lm_head = target.get_output_embeddings().weight
    config = head_config(target.config, int(lm_head.shape[0]))
    vocab = draft_vocab or DraftVocab(int(lm_head.shape[0]))
    if features.fusion == "eagle3":
        config.architectures = ["LlamaForCausalLMEagle3"]
        config.draft_vocab_size = vocab.size
        head = Eagle3Head(config, features, int(lm_head.shape[1]), int(lm_head.shape[0]), vocab)
    else:
        head = EagleHead(config, features, draft_vocab=vocab)
    init_linear_layers(head, head.config.initializer_range)
    with torch.no_grad():
        head.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
        if isinstance(head, Eagle3Head):
            head.lm_head.weight.copy_(vocab.restrict(lm_head.T).T)
            final_norm = getattr(target.base_model, "norm", None)
            if final_norm is not None:
                head.norm.weight.copy_(final_norm.weight)
    return head
