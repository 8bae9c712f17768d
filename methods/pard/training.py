"""Training a PARD drafter: ``python -m harness train --method pard --target T --data TOKENS.pt --out DIR
[--opt init=DRAFT_LM]``.

PARD adapts an autoregressive draft LM (``init``; without it, a fresh LM of the shape options) to parallel
drafting, target-independent: on the token stream, not on the target's outputs (``distill: true`` distils from the
target instead, an ablation). The vocabulary gains one mask token (``pard_token`` in the config, the new last row,
started at the mean embedding). A training forward reads a window of ``seq_len`` tokens and, for ``anchors``
positions a of it, a block of ``k - 1`` masks at positions a + 1 .. a + k - 1: each window token sees the window
causally, each mask its anchor's prefix and the masks before it in its block, so mask j learns x_{a+1+j} from
x_{0..a} alone, as it drafts. The loss is the mean cross-entropy over every window token's next token and every
mask's label. ``cod_ratio`` < 1 is PARD's conditional drop-token (COD; its ``down_sample_ration`` and
``down_sample_ration_min``): mask j is trained by only floor(anchors x max(cod_ratio^j, cod_min)) anchors, drawn
among those that kept mask j - 1 (``harness.training.mask_blocks.drop_tokens``), so more anchors cost fewer mask
slots; the default 1 trains every anchor's k - 1 masks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from harness.backend.models import LoadedModel
from harness.data.token_streams import even_windows, load_tokens, random_windows
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.drafter_contract import COMPONENTS, parameter_components
from harness.training.drafters import (
    budgeted, fingerprint_options,
    AGREEMENT, META_FILE, DrafterTrainRequest, checked_agreement, drafter_provenance, frozen_target, write_metrics,
)
from harness.training.loop import TrainConfig, batches_from_step, train
from harness.training.mask_blocks import BlockLayout, block_layout, choose_anchors, drop_tokens, every_kth_anchor
from harness.training.zoo import ModelShape, heldout_perplexity, kl_to_teacher, save_directory


@dataclass(frozen=True)
class PardTrainOptions:
    """PARD's training options. No ``draft_vocab`` (``harness.training.draft_vocab``): the drafter is a draft LM whose
    own LM head covers the target's vocabulary and its mask token, and its logits are the LM's own, not a target-sized
    head's rows; a reduced LM head would be a change to the draft LM itself."""

    k: int = 4  # drafts per forward the drafter is trained for (k - 1 masks per block)
    anchors: int = 32  # blocks of masks per window
    cod_ratio: float = 1.0  # PARD's conditional drop-token: mask j kept by a share max(cod_ratio^j, cod_min) of the
    cod_min: float = 0.0  # anchors (AMD's recipe: 0.7 and 0.2); 1: every anchor keeps all k - 1 masks
    init: str = ""  # the autoregressive draft LM to adapt (empty: a fresh LM of the sizes below)
    hidden_size: int = 0  # a fresh LM's sizes (0: half the target's width, one layer, the target's heads and
    num_layers: int = 0  # MLP ratio)
    num_heads: int = 0
    intermediate_size: int = 0
    distill: bool = False  # labels: the target's distribution (KL) instead of the stream's tokens
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 1e-3
    warmup_steps: int = 20
    warmup_fraction: float = 0.0  # > 0: warm up for this share of the steps (harness.training.loop.TrainConfig)
    precision: Literal["fp32", "bf16"] = "fp32"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.k < 2 or self.anchors < 1 or self.batch_size < 1:
            raise DraftcountError(f"pard training needs k >= 2, anchors >= 1 and batch_size >= 1, got {self.k}, "
                                  f"{self.anchors} and {self.batch_size}")
        if not (0 < self.cod_ratio <= 1 and 0 <= self.cod_min <= 1):
            raise DraftcountError(f"pard training needs 0 < cod_ratio <= 1 and 0 <= cod_min <= 1, got "
                                  f"{self.cod_ratio} and {self.cod_min}")
        if self.seq_len < self.k + 2:
            raise DraftcountError(f"pard training: seq_len {self.seq_len} must exceed k + 1 ({self.k + 1})")


def block_inputs(windows: torch.Tensor, layout: BlockLayout, mask_token: int, dtype: torch.dtype) -> dict:
    """The model's keyword inputs for ``windows`` (B, L) laid out as ``layout`` says."""
    rows, length = windows.shape
    masks = torch.full((rows, layout.masks), mask_token, dtype=windows.dtype, device=windows.device)
    return {"input_ids": torch.cat([windows, masks], dim=1),
            "position_ids": layout.positions.to(windows.device)[None].expand(rows, -1),
            "attention_mask": layout.bias(dtype, windows.device).expand(rows, 1, -1, -1)}


def block_loss(model: LlamaForCausalLM, windows: torch.Tensor, layout: BlockLayout, mask_token: int,
               teacher: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over every labelled input; with ``teacher`` logits (B, L, V) of the window, KL(teacher ||
    model) at the position before each label instead."""
    logits = model(**block_inputs(windows, layout, mask_token, torch.float32)).logits.float()
    labelled = (layout.labels >= 0).nonzero().squeeze(1).to(windows.device)
    label_index = layout.labels.to(windows.device)[labelled]
    student = logits[:, labelled]
    if teacher is None:
        targets = windows[:, label_index]
        return F.cross_entropy(student.reshape(-1, student.shape[-1]), targets.reshape(-1))
    return kl_to_teacher(teacher[:, label_index - 1], student[..., : teacher.shape[-1]])


def with_mask_token(model: LlamaForCausalLM, target_vocab: int) -> LlamaForCausalLM:
    """``model`` with its ``pard_token`` (a new last vocabulary row at the mean embedding, unless it has one)."""
    if getattr(model.config, "pard_token", None) is not None:
        return model
    if model.config.vocab_size != target_vocab:
        raise DraftcountError(f"pard: the draft LM's vocabulary ({model.config.vocab_size}) is not the target's "
                              f"({target_vocab})")
    model.resize_token_embeddings(target_vocab + 1, mean_resizing=False)
    with torch.no_grad():
        for matrix in {id(m): m for m in (model.get_input_embeddings(), model.get_output_embeddings())}.values():
            matrix.weight[target_vocab] = matrix.weight[:target_vocab].mean(0)
    model.config.pard_token = target_vocab
    return model


def initial_drafter(options: PardTrainOptions, target: LoadedModel) -> LlamaForCausalLM:
    """The draft LM to adapt (``init``), or a fresh one of the options' shape, with its mask token."""
    if options.init:
        if not Path(options.init).is_dir():
            raise DraftcountError(f"pard: the draft LM to adapt ({options.init}) is not a directory")
        model = AutoModelForCausalLM.from_pretrained(options.init, dtype=torch.float32)
    else:
        text = getattr(target.config, "text_config", None) or target.config
        heads = options.num_heads or int(text.num_attention_heads)
        hidden = options.hidden_size or max(2 * heads, int(text.hidden_size) // 2 // (2 * heads) * 2 * heads)
        ratio = int(text.intermediate_size) / int(text.hidden_size)
        shape = ModelShape(hidden_size=hidden, num_layers=options.num_layers or 1, num_heads=heads,
                           intermediate_size=options.intermediate_size or max(1, round(hidden * ratio)),
                           context=int(getattr(text, "max_position_embeddings", 1024)))
        torch.manual_seed(options.seed)
        model = LlamaForCausalLM(shape.config(target.vocab_size, text.bos_token_id, text.eos_token_id))
    return with_mask_token(model.to(target.device), target.vocab_size)


@torch.no_grad()
def block_agreement(model: LlamaForCausalLM, target: LoadedModel, windows: torch.Tensor, k: int) -> list[float]:
    """Per draft position 1..k: how often the drafter's argmax there equals the target's argmax at the same
    position given the true text (a block after every k-th token of each held-out window)."""
    layout = block_layout(windows.shape[1], every_kth_anchor(windows.shape[1], k), k)
    agree = [0] * k
    for rows in windows.split(8):
        drafted = model(**block_inputs(rows, layout, int(model.config.pard_token), torch.float32)).logits
        wanted = target.model(input_ids=rows).logits.argmax(-1)
        hits = layout.draft_hits(drafted[..., : target.vocab_size].argmax(-1), wanted)
        agree = [total + count for total, count in zip(agree, hits)]
    return [hits / (windows.shape[0] * len(layout.anchors)) for hits in agree]


def train_pard(request: DrafterTrainRequest) -> dict:
    """Adapt (with 0 steps: just prepare) the drafter and save it to ``request.out``; its metrics."""
    options = parse_options(PardTrainOptions, request.options, "pard training")
    request = budgeted(request, options)
    data = Path(request.data)
    if not data.is_file():
        raise DraftcountError(f"pard trains on a token stream (.pt, `data: tokens`), not {data}")
    tokens = load_tokens(data)
    target = frozen_target(request)
    model = initial_drafter(options, target)
    mask_token = int(model.config.pard_token)

    def loss_fn(step: int) -> tuple[torch.Tensor, int]:
        # host: anchors and drops
        generator = torch.Generator(device="cpu").manual_seed(options.seed * 1_000_003 + step + 7)
        windows = batches_from_step(step, options.seed,
                                    lambda g: random_windows(tokens, options.batch_size, options.seq_len, g))
        windows = windows.to(target.device)
        anchors = choose_anchors(options.seq_len, options.k, options.anchors, generator)
        kept = drop_tokens(len(anchors), options.k, options.cod_ratio, options.cod_min, generator) \
            if options.cod_ratio < 1 else None
        layout = block_layout(options.seq_len, anchors, options.k, kept)
        teacher = None
        if options.distill:
            with torch.no_grad():
                teacher = target.model(input_ids=windows).logits
        return block_loss(model, windows, layout, mask_token, teacher), windows.numel()

    config = TrainConfig(steps=request.steps, time_budget_s=request.time_budget_s, lr=options.lr,
                         warmup_steps=options.warmup_steps, warmup_fraction=options.warmup_fraction,
                         precision=options.precision, seed=options.seed)
    fingerprint = {"method": "pard", "target": request.target, "data": str(request.data), **fingerprint_options(options)}
    result = train(model, loss_fn, config, request.checkpoint, fingerprint, "train pard drafter", request.progress)
    model.eval()
    metrics = {"method": "pard", "trainable_parameters": sum(p.numel() for p in model.parameters()),
               COMPONENTS: parameter_components(model),
               "target_parameters": target.num_parameters, "options": asdict(options), "train": result.as_dict(),
               "target": request.target, "data": str(request.data), "pard_token": mask_token}
    if request.heldout is not None:
        windows = even_windows(load_tokens(request.heldout), 16, options.seq_len).to(target.device)
        metrics["heldout_perplexity"] = heldout_perplexity(model, windows)
        metrics[AGREEMENT] = checked_agreement("pard", block_agreement(model, target, windows, options.k))

    def save(path: Path) -> None:
        model.cpu().save_pretrained(path)
        write_metrics(path / META_FILE, {**drafter_provenance(request, result), "kind": "pard", "metrics": metrics})

    save_directory(Path(request.out), save)
    return metrics
