"""The PRISM drafter (Wang et al., MLSys 2026): M EAGLE-1/2 modules, one per draft step, over one KV cache.

Each module is EAGLE-1/2's fusion ``fc`` over [token embedding; feature] and one decoder layer (no input norm),
with its own parameters; the token embedding and the LM head are the target's, frozen. A step-to-module map
``f_map`` (``step_modules``: entry k - 1 is the 1-based module of draft step k, the last entry repeats for every
later step) picks the one module a step runs, so a step costs what an EAGLE head step costs while the drafter holds
M times its parameters. Draft step 1 is the catch-up (prefill) forward over the accepted tokens, whose last output
drafts depth 1; step k >= 2 feeds the depth k-1 tokens and drafts depth k. Every module's layer is layer 0 of the
same one-layer KV cache, so a later module attends to the keys and values an earlier module wrote (the paper's
shared KV cache). Parameter names: ``blocks.{m}.fc.*`` and ``blocks.{m}.layer.*`` (m = 0..M-1).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, PreTrainedModel
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from harness.backend.models import ModelCost
from harness.errors import DraftcountError
from harness.training.draft_vocab import DraftVocab
from harness.training.drafters import (
    check_target_fit, check_weights, head_config, init_linear_layers, read_drafter, write_drafter,
)
from harness.training.features import FeatureSpec
from methods.eagle.head import fused_layer_forward, head_decoder_layer

MAIN_STEP_MODULES = (1, 2)  # the paper's main setting: module 1 drafts step 1, module 2 every later step


def check_step_modules(step_modules: tuple[int, ...]) -> int:
    """The number of modules M of a step-to-module map; it must map onto every module 1..M (a surjection)."""
    if not step_modules or any(module < 1 for module in step_modules):
        raise DraftcountError(f"step_modules must be a non-empty list of 1-based module numbers, got {step_modules}")
    count = max(step_modules)
    unused = sorted(set(range(1, count + 1)) - set(step_modules))
    if unused:
        raise DraftcountError(f"step_modules {list(step_modules)} never uses module(s) {unused}: every module 1..M "
                              f"must draft some step")
    return count


def module_of_step(step_modules: tuple[int, ...], step: int) -> int:
    """The 0-based module that runs draft step ``step`` (1-based; the map's last entry repeats)."""
    if step < 1:
        raise DraftcountError(f"draft steps count from 1, got {step}")
    return step_modules[min(step, len(step_modules)) - 1] - 1


class PrismBlock(nn.Module):
    """One processing module: EAGLE-1/2's fusion layer and decoder layer."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=True)
        self.layer = head_decoder_layer(config)


class StepModulesHead(nn.Module):
    """What a drafter of M modules, one per draft step over one KV cache, shares (PRISM's, and `mtp`'s): its
    feature input, its logits through the target's frozen LM head, and the cost of one step (one module). A
    subclass builds ``blocks``, ``config`` and ``features`` and picks a step's module (``module_index``)."""

    blocks: nn.ModuleList
    config: LlamaConfig
    draft_vocab: DraftVocab

    @property
    def module_count(self) -> int:
        return len(self.blocks)

    def module_index(self, step: int) -> int:
        raise NotImplementedError

    def input_features(self, rows: list[torch.Tensor]) -> torch.Tensor:
        """The drafter's feature input: the target's last layer."""
        return rows[0]

    def logits(self, hidden: torch.Tensor, target_lm_head: nn.Module) -> torch.Tensor:
        """Drafts through the target's own (frozen) LM head (its draft vocabulary's rows: draft ids)."""
        return self.draft_vocab.logits(hidden, target_lm_head)

    def trainable_parameters(self) -> int:
        """All M modules' parameters (what the drafter holds)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def step_parameters(self) -> int:
        """One module's parameters (what one draft step runs): an EAGLE head's at the same width."""
        return sum(p.numel() for p in self.blocks[0].parameters())

    def cost(self, lm_head_params: int) -> ModelCost:
        """The FLOPs of one draft step: one module, as an EAGLE head step."""
        return ModelCost(body_params=self.step_parameters(), head_params=self.draft_vocab.head_params(lm_head_params),
                         num_layers=1,
                         attention_width=self.config.num_attention_heads * self.config.head_dim)


class PrismHead(StepModulesHead):
    """The drafter (see the module docstring). ``forward(..., step=k)`` runs module ``f_map(k)``."""

    def __init__(self, config: LlamaConfig, step_modules: tuple[int, ...] = MAIN_STEP_MODULES,
                 draft_vocab: DraftVocab | None = None) -> None:
        super().__init__()
        config._attn_implementation = "sdpa"
        self.config = config
        self.draft_vocab = draft_vocab or DraftVocab(config.vocab_size)
        self.features = FeatureSpec("none", ("last",))
        self.step_modules = tuple(int(module) for module in step_modules)
        count = check_step_modules(self.step_modules)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.blocks = nn.ModuleList([PrismBlock(config) for _ in range(count)])
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def module_index(self, step: int) -> int:
        return module_of_step(self.step_modules, step)

    def forward(self, features: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor,
                cache: DynamicCache | None = None, attention_bias: torch.Tensor | None = None,
                step: int = 1) -> torch.Tensor:
        """(B, q, H) predicted next features for pairs (feature at p, token at p + 1), by draft step ``step``'s
        module, appending to (and attending over) the shared ``cache``."""
        block = self.blocks[self.module_index(step)]
        return fused_layer_forward(self.embed_tokens, self.rotary_emb, block.fc, block.layer, features, input_ids,
                                   position_ids, cache, attention_bias)


def new_step_modules_head(target: PreTrainedModel, seed: int,
                          build: Callable[[LlamaConfig], StepModulesHead]) -> StepModulesHead:
    """A freshly initialised step-module drafter for ``target``, ``build`` given its one-layer Llama config (EAGLE's
    initialisation of the linear layers; the target's embedding, frozen; ``build`` gives it its draft vocabulary)."""
    torch.manual_seed(seed)
    vocab = int(target.get_output_embeddings().weight.shape[0])
    head = build(head_config(target.config, vocab))
    init_linear_layers(head, head.config.initializer_range)
    with torch.no_grad():
        head.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
    return head


def new_prism_head(target: PreTrainedModel, step_modules: tuple[int, ...], seed: int,
                   draft_vocab: DraftVocab | None = None) -> PrismHead:
    """A freshly initialised drafter for ``target`` (EAGLE's initialisation; the target's embedding, frozen)."""
    return new_step_modules_head(target, seed, lambda config: PrismHead(config, step_modules, draft_vocab))


def replicate_module(head: PrismHead, step_modules: tuple[int, ...]) -> PrismHead:
    """PRISM's phase 2 start: a drafter with map ``step_modules`` whose every module is a copy of ``head``'s
    single (phase-1) module."""
    if head.module_count != 1:
        raise DraftcountError(f"only a one-module drafter is replicated, this one has {head.module_count}")
    grown = PrismHead(copy.deepcopy(head.config), step_modules, head.draft_vocab).to(head.embed_tokens.weight.device)
    with torch.no_grad():
        grown.embed_tokens.weight.copy_(head.embed_tokens.weight)
        for block in grown.blocks:
            block.load_state_dict(head.blocks[0].state_dict())
    return grown


# A step-module drafter's directory: config.json (every module's one-layer Llama shape), model.safetensors (the
# modules' weights; the token embedding is the target's and is not stored) and our metadata (the method's own keys).

def save_step_modules_head(head: StepModulesHead, out_dir: Path, provenance: dict, method: str, **meta) -> None:
    state = {name: tensor for name, tensor in head.state_dict().items() if name != "embed_tokens.weight"}
    meta = {"fusion": "none", "feature_layers": ["last"], **meta, "modules": head.module_count,
            "trainable_parameters": head.trainable_parameters(), "step_parameters": head.step_parameters(),
            **provenance}
    write_drafter(out_dir, method, state, meta, head.config, head.draft_vocab)


def load_step_modules_head(source: str | Path, target: PreTrainedModel, method: str, label: str,
                           build: Callable[[LlamaConfig, dict, DraftVocab], StepModulesHead]) -> StepModulesHead:
    """A step-module drafter trained here for ``target`` with ``method``, ``build`` given its config, our metadata
    and its draft vocabulary, in eval mode."""
    files = read_drafter(source, method)
    config, label = files.llama_config(), f"{label} {files.directory}"
    check_target_fit(label, config.hidden_size, config.vocab_size, target)
    head = build(config, files.meta, files.draft_vocab(config.vocab_size, label))
    check_weights(head, files.state, label, frozenset({"embed_tokens.weight"}))
    head.load_state_dict({**files.state, "embed_tokens.weight": target.get_input_embeddings().weight.detach().cpu()})
    return head.eval()


def save_prism(head: PrismHead, out_dir: Path, provenance: dict) -> None:
    """PRISM's directory: ``blocks.{m}.fc.*``, ``blocks.{m}.layer.*`` and ``step_modules`` in the metadata."""
    save_step_modules_head(head, out_dir, provenance, "prism", step_modules=list(head.step_modules))


def load_prism(source: str | Path, target: PreTrainedModel) -> PrismHead:
    """A PRISM drafter trained here for ``target``, in eval mode."""
    return load_step_modules_head(source, target, "prism", "PRISM drafter",
                                  lambda config, meta, vocab: PrismHead(config, tuple(meta.get("step_modules", ())),
                                                                        vocab))
