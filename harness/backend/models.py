"""Loading target and draft models from a local HF directory or a hub id.

Every failure a user can cause (missing path, a directory with no model, a
draft whose tokenizer differs from the target's) is a one-line
DraftcountError.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch
from transformers import (
    AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer, LlamaConfig, LlamaForCausalLM,
    PreTrainedModel, PreTrainedTokenizerBase,
)

from harness.errors import DraftcountError, first_line
from harness.store.files import UNREADABLE, check_safetensors, read_json
from harness.store.hub import is_hub_id, model_snapshot

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def text_config(config):
    """The decoder's text configuration: the config itself for a text-only model."""
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config


@dataclass(frozen=True)
class ModelCost:
    """What the analytic FLOP estimate needs: 2 x params x tokens + attention."""

    body_params: int  # matrix-product parameters below the LM head
    head_params: int  # the LM head (output embedding)
    num_layers: int
    attention_width: int

    def forward_flops(self, new_tokens: int, total_tokens: int, logits_tokens: int | None = None) -> float:
        """FLOPs of one forward over ``new_tokens`` queries attending ``total_tokens`` keys.

        ``logits_tokens``: positions the LM head is applied to (default: all new tokens).
        """
        head_tokens = new_tokens if logits_tokens is None else logits_tokens
        dense = 2.0 * (self.body_params * new_tokens + self.head_params * head_tokens)
        attention = 4.0 * self.num_layers * self.attention_width * new_tokens * total_tokens
        return dense + attention


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase | None
    source: str
    dtype: torch.dtype
    device: torch.device
    cost: ModelCost

    @property
    def config(self):
        """The decoder's configuration (a vision-language model's text config: what decodes, what drafters match)."""
        return text_config(self.model.config)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def context_length(self) -> int | None:
        config = text_config(self.model.config)
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    @cached_property
    def hidden_state_count(self) -> int:
        """How many hidden states a forward returns: the embeddings and every decoder layer's output."""
        return int(text_config(self.config).num_hidden_layers) + 1

    @property
    def num_parameters(self) -> int:
        return sum(parameter.numel() for parameter in self.model.parameters())


VISION_MODULES = ("vision_tower", "multi_modal_projector")  # a LLaVA-style model's image path: once per image


def eos_token_ids(*sources) -> frozenset[int]:
    """The end-of-sequence ids ``sources`` name (a tokenizer, a model's config or generation config; None skipped):
    each one's ``eos_token_id``, an id or a list of them."""
    ids: set[int] = set()
    for source in sources:
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(item) for item in value)
    return frozenset(ids)


def model_cost(model: PreTrainedModel) -> ModelCost:
    """Parameters that take part in matrix products per token: all but the input embedding table (a lookup) and a
    vision-language model's vision tower and projector (they run once per image, at prefill: not counted)."""
    input_embedding = model.get_input_embeddings()
    skipped = {id(parameter) for parameter in input_embedding.parameters()} if input_embedding is not None else set()
    base = getattr(model, "model", None)
    for name in VISION_MODULES:
        module = getattr(base, name, None)
        if isinstance(module, torch.nn.Module):
            skipped |= {id(parameter) for parameter in module.parameters()}
    output = model.get_output_embeddings()
    head = {id(parameter) for parameter in output.parameters()} if output is not None else set()
    skipped |= head
    body_params = sum(p.numel() for p in model.parameters() if id(p) not in skipped)
    head_params = sum(p.numel() for p in output.parameters()) if output is not None else 0
    config = text_config(model.config)
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    kinds = getattr(config, "layers_block_type", None)  # a hybrid (Bamba): attention in its attention layers only
    if isinstance(kinds, (list, tuple)) and len(kinds) == layers:  # (a Mamba2 layer's scan is not counted)
        layers = sum(kind == "full_attention" for kind in kinds)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    head_dim = getattr(config, "head_dim", None) or (config.hidden_size // max(heads, 1))
    return ModelCost(
        body_params=body_params, head_params=head_params, num_layers=layers, attention_width=int(heads * head_dim)
    )


def resolve_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise DraftcountError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[name]


def resolve_device(name: str) -> torch.device:
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DraftcountError(f"unknown device {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DraftcountError(f"device {name!r} requested but CUDA is not available on this machine")
    return device


def check_model_source(source: str) -> None:
    """A local path must exist and hold a model (config.json); hub ids pass through."""
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise DraftcountError(f"model path '{source}' holds no model (no config.json in it)")
        return
    if not is_hub_id(source):
        raise DraftcountError(f"model path '{source}' does not exist")


def model_location(source: str) -> str:
    """Where the model named ``source`` (a local directory or a hub id) lies on this machine."""
    return str(Path(source).expanduser()) if not is_hub_id(source) else str(model_snapshot(source))


def check_model_files(location: Path) -> None:
    """A model directory's config.json parses and its safetensors files are whole (their headers read): one line
    naming the file otherwise, before transformers loads it (whose error names neither)."""
    if (location / "config.json").is_file():
        read_json(location / "config.json", "model config")
    check_safetensors(location, "model weights")


def model_class(location: str) -> type:
    """The auto class that loads the model at ``location``: a causal LM, or a vision-language model (a LLaVA-style
    config with a ``vision_config``: its language model decodes, its vision tower runs at prefill)."""
    try:
        config = AutoConfig.from_pretrained(location)
    except (OSError, ValueError, KeyError):
        return AutoModelForCausalLM  # its loading then names what is wrong
    return AutoModelForImageTextToText if hasattr(config, "vision_config") else AutoModelForCausalLM


def load_model(
    source: str,
    dtype: str = "float32",
    device: str = "cpu",
    attn_implementation: str = "sdpa",
    with_tokenizer: bool = True,
) -> LoadedModel:
    """Load a causal LM (and its tokenizer) for inference, in eval mode on ``device``."""
    check_model_source(source)
    torch_dtype = resolve_dtype(dtype)
    torch_device = resolve_device(device)
    location = model_location(source)
    check_model_files(Path(location))
    try:
        model = model_class(location).from_pretrained(location, dtype=torch_dtype,
                                                      attn_implementation=attn_implementation)
    except (*UNREADABLE, KeyError) as error:
        raise DraftcountError(f"could not load a causal LM from '{source}': {first_line(error)}") from None
    tokenizer = None
    if with_tokenizer:
        try:
            tokenizer = AutoTokenizer.from_pretrained(location)
        except (OSError, ValueError, KeyError) as error:
            raise DraftcountError(f"could not load the tokenizer of '{source}': {first_line(error)}") from None
    model.to(torch_device).eval()
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        source=source,
        dtype=torch_dtype,
        device=torch_device,
        cost=model_cost(model),
    )


def eos_ids(target: LoadedModel) -> frozenset[int]:
    """The token ids that end a generation: the tokenizer's EOS and the generation config's (one or several)."""
    return eos_token_ids(target.tokenizer, getattr(target.model, "generation_config", None))


def wrap_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None = None, source: str = "<memory>") -> LoadedModel:
    """A LoadedModel around an in-memory model (tests, training loops)."""
    parameter = next(model.parameters())
    return LoadedModel(
        model=model.eval(),
        tokenizer=tokenizer,
        source=source,
        dtype=parameter.dtype,
        device=parameter.device,
        cost=model_cost(model),
    )


def load_like_target(source: str, target: LoadedModel, label: str) -> LoadedModel:
    """A causal LM a method drafts with (polybasic's mid LM, PARD's drafter) in the target's dtype, on its device,
    without a tokenizer; one line naming ``label`` for a dtype without a name here."""
    names = {dtype: name for name, dtype in DTYPES.items()}
    if target.dtype not in names:
        raise DraftcountError(f"{label}: the target's dtype {target.dtype} has no name to load it with")
    return load_model(str(source), names[target.dtype], str(target.device), with_tokenizer=False)


def check_same_tokenizer(target: LoadedModel, draft: LoadedModel) -> None:
    """A draft model must share the target's vocabulary token for token."""
    if target.tokenizer is None or draft.tokenizer is None:
        if target.vocab_size != draft.vocab_size:
            raise DraftcountError(
                f"draft vocabulary size {draft.vocab_size} differs from the target's {target.vocab_size}"
            )
        return
    target_vocab = target.tokenizer.get_vocab()
    draft_vocab = draft.tokenizer.get_vocab()
    if target_vocab != draft_vocab:
        differing = len(set(target_vocab.items()) ^ set(draft_vocab.items()))
        raise DraftcountError(
            f"draft tokenizer of '{draft.source}' differs from the target's "
            f"({len(draft_vocab)} vs {len(target_vocab)} tokens, {differing} entries differ)"
        )


def random_llama(config: LlamaConfig, seed: int | None = 0, dtype: torch.dtype = torch.float32,
                 device: str = "cpu") -> LlamaForCausalLM:
    """A Llama of ``config`` with random weights (seeded unless ``seed`` is None), built directly in ``dtype`` on
    ``device``, in eval mode: the one builder of the measurements' random models."""
    if seed is not None:
        torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()

