"""What training any drafter (EAGLE head, Lyanna backbone) shares: the request from the command line,
a frozen target, feature batches from a dump or on the fly, soft cross-entropy, the attention mask of
unrolled training-time-test steps, and saving a drafter directory atomically.

Under ``torchrun --nproc_per_node N`` the processes train one drafter data-parallel: each draws its micro-batches
of every step's global batch (``batch_size * grad_accum * N`` rows), and only rank 0 goes on past training to
evaluate and write the drafter; the others end once training is done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, PretrainedConfig

from harness.errors import DraftcountError
from harness.training import distributed
from harness.training.distributed import Shard
from harness.training.features import FeatureSource, target_features
from harness.data.token_streams import even_windows, load_tokens
from harness.backend.models import LoadedModel, load_model
from harness.store.records import environment
from harness.training.objectives import DEFAULT_OBJECTIVE, check_objective
from harness.training.loop import TrainConfig, TrainResult, batches_from_step, train


@dataclass(frozen=True)
class DrafterTrainRequest:
    """``python -m harness train`` arguments: the method's own options stay strings until it parses them."""

    method: str
    target: str
    data: Path  # a feature dump directory (index.json) or a token stream (.pt) for features on the fly
    out: Path
    steps: int = 1000
    time_budget_s: float = 0.0
    options: dict[str, str] = field(default_factory=dict)
    heldout: Path | None = None  # a token stream to evaluate the drafter on
    device: str = "cpu"
    checkpoint: Path | None = None
    progress: bool = True


@dataclass(frozen=True)
class DrafterLoopOptions:
    """Training-loop options every drafter trainer takes; a method's options dataclass extends it."""

    batch_size: int = 8  # rows per micro-batch (per process)
    grad_accum: int = 1  # micro-batches per step and process: a step is batch_size * grad_accum * processes rows
    seq_len: int = 256
    lr: float = 1e-3
    warmup_steps: int = 20
    precision: Literal["fp32", "bf16"] = "fp32"
    seed: int = 0
    objective: str = DEFAULT_OBJECTIVE  # a name in harness.training.objectives.OBJECTIVES

    def __post_init__(self) -> None:
        check_objective(self.objective)
        if self.batch_size < 1 or self.grad_accum < 1:
            raise DraftcountError(f"batch_size and grad_accum must be >= 1, got {self.batch_size} and {self.grad_accum}")


def frozen_target(request: DrafterTrainRequest) -> LoadedModel:
    """The target, frozen, on this process's device (under torchrun, ``cuda`` is GPU LOCAL_RANK)."""
    target = load_model(request.target, "float32", distributed.local_device(request.device), with_tokenizer=False)
    target.model.requires_grad_(False)
    return target


def feature_source(request: DrafterTrainRequest, target: LoadedModel, layers: list[int | str],
                   seq_len: int) -> FeatureSource:
    """Batches from a feature dump directory, or computed by the target from a token stream."""
    data = Path(request.data)
    if data.is_dir():
        if not (data / "index.json").is_file():
            raise DraftcountError(f"training data {data} is a directory without a feature dump (index.json)")
        return FeatureSource(layers=layers, seq_len=seq_len, dump_dir=data)
    if not data.is_file():
        raise DraftcountError(f"training data {data} does not exist")
    return FeatureSource(layers=layers, seq_len=seq_len, target=target.model, tokens=load_tokens(data))


def unrolled_step_bias(length: int, step: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive mask (1, 1, length, (step + 1) * length) for step ``step`` of unrolled training.

    Step 0 is ordinary causal attention over true features. At step k the query
    at position p stands for drafting k positions ahead of the true prefix: it
    sees the true keys of positions <= p - k and, from each step i = 1..k, the
    key at position p - k + i (its own chain of predicted states, itself last).
    """
    minimum = torch.finfo(dtype).min
    query = torch.arange(length)[:, None]
    key = torch.arange(length)[None, :]
    blocks = [torch.where(key <= query - step, 0.0, minimum)]
    for index in range(1, step + 1):
        blocks.append(torch.where(key == query - step + index, 0.0, minimum))
    return torch.cat(blocks, dim=1).to(device, dtype)[None, None]


def unrolled_step_mask(outputs: torch.Tensor, step: int) -> torch.Tensor:
    """(B, T) float mask of the positions unrolled step ``step`` (0-based) is trained on: p >= step, the positions
    that have ``step`` predicted states of their own before them (``unrolled_step_bias``)."""
    keep = (torch.arange(outputs.shape[1], device=outputs.device) >= step).float()
    return keep[None].expand(outputs.shape[0], -1)


def shift_right(states: torch.Tensor) -> torch.Tensor:
    """(B, T, H) -> the same with position p holding position p - 1's row (zeros at p = 0)."""
    return torch.cat([torch.zeros_like(states[:, :1]), states[:, :-1]], dim=1)


def unrolled_forward(step_forward: Callable[..., torch.Tensor], first_inputs: torch.Tensor,
                     feed_back: Callable[[torch.Tensor], torch.Tensor], steps: int,
                     config: PretrainedConfig) -> list[torch.Tensor]:
    """Outputs (B, T, H) of ``steps`` training-time-test steps of a one-layer drafter.

    ``step_forward(inputs, position_ids, cache, bias)`` runs the drafter; step 0
    gets ``first_inputs`` (from true features), step k gets ``feed_back`` of
    step k-1's outputs, with ``unrolled_step_bias`` over the keys of all steps
    so far (one cache holds them). A single step is plain causal attention.
    """
    length = first_inputs.shape[1]
    position_ids = torch.arange(length, device=first_inputs.device)[None].expand(first_inputs.shape[0], -1)
    cache = DynamicCache(config=config) if steps > 1 else None
    inputs, outputs = first_inputs, []
    for step in range(steps):
        bias = unrolled_step_bias(length, step, inputs.dtype, inputs.device) if cache is not None else None
        outputs.append(step_forward(inputs, position_ids, cache, bias))
        inputs = feed_back(outputs[-1])
    return outputs


def shard_batch(source: FeatureSource, batch_size: int, shard: Shard,
                generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Rows ``shard.rows(batch_size)`` of the global batch ``source.batch(batch_size * shard.count, generator)``,
    loading (or computing the features of) those rows alone. One micro-batch is ``source.batch`` itself."""
    return source.batch(batch_size * shard.count, generator, shard.rows(batch_size))


def fit_drafter(module: torch.nn.Module, batch_loss: Callable[[dict[str, torch.Tensor]], torch.Tensor],
                source: FeatureSource, target: LoadedModel, request: DrafterTrainRequest,
                options: DrafterLoopOptions) -> TrainResult:
    """The shared loop over ``source`` batches; all of ``options`` (the method's training options) goes into
    the checkpoint's fingerprint, but how the global batch is split (grad_accum x processes) does not.

    ``batch_loss`` must be a mean over the batch's rows, so that a global batch's loss is the mean of its
    micro-batches'. Under torchrun, a process other than rank 0 leaves (``SystemExit(0)``) once training is
    done: its drafter is rank 0's, which alone is evaluated and written.
    """

    def loss_fn(step: int, shard: Shard) -> tuple[torch.Tensor, int]:
        batch = batches_from_step(step, options.seed,
                                  lambda generator: shard_batch(source, options.batch_size, shard, generator))
        batch = {key: value.to(target.device) for key, value in batch.items()}
        return batch_loss(batch), batch["input_ids"].numel()

    config = TrainConfig(steps=request.steps, time_budget_s=request.time_budget_s, lr=options.lr,
                         warmup_steps=options.warmup_steps, precision=options.precision, seed=options.seed,
                         grad_accum=options.grad_accum)
    fingerprint = {"method": request.method, "target": request.target, "data": str(request.data),
                   **{key: value for key, value in asdict(options).items() if key != "grad_accum"}}
    result = train(module, loss_fn, config, request.checkpoint, fingerprint, f"train {request.method} drafter",
                   request.progress, sharded=True)
    if distributed.world().size > 1:
        distributed.shutdown()
        if not distributed.is_main():
            raise SystemExit(0)
    return result


def heldout_batch(heldout: torch.Tensor, target: LoadedModel, layers: list[int | str],
                  seq_len: int) -> dict[str, torch.Tensor]:
    """16 evenly spaced held-out windows with the target's features, to evaluate a drafter on."""
    windows = even_windows(heldout, 16, seq_len).to(target.device)
    return {"input_ids": windows, **target_features(target.model, windows, layers)}


def drafter_provenance(request: DrafterTrainRequest, result: TrainResult) -> dict:
    return {"target": request.target, "data": str(request.data), "train_steps": result.steps,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **environment()}


def write_metrics(path: Path, metrics: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=2, default=str) + "\n")


# Drafter checkpoints: the metadata file beside the weights, a one-layer config shaped like the target's
# layers, and the initialisation every fresh drafter gets.

META_FILE = "draftcount_drafter.json"


def head_config(target_config, vocab_size: int) -> LlamaConfig:
    """A one-layer Llama configuration shaped like the target's layers."""
    text = getattr(target_config, "text_config", None) or target_config
    hidden = int(text.hidden_size)
    heads = int(text.num_attention_heads)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=int(text.intermediate_size),
        num_hidden_layers=1, num_attention_heads=heads,
        num_key_value_heads=int(getattr(text, "num_key_value_heads", None) or heads),
        head_dim=int(getattr(text, "head_dim", None) or hidden // heads),
        rms_norm_eps=float(getattr(text, "rms_norm_eps", 1e-6)),
        max_position_embeddings=int(getattr(text, "max_position_embeddings", 4096)),
        rope_parameters=getattr(text, "rope_parameters", None), tie_word_embeddings=False,
        architectures=["LlamaForCausalLM"],
    )
    return config


def init_linear_layers(module: nn.Module, std: float) -> None:
    """Normal(0, std) weights and zero biases for every linear layer of a fresh drafter."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, std=std)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
