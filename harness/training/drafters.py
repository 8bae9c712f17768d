"""What training any drafter family (eagle, lyanna, prism, owl, ...) shares: the request from the command line,
a frozen target, feature batches from a dump or on the fly, the attention mask of unrolled training-time-test
steps, the shared loop, and the drafter kit: a drafter directory's format (``write_drafter``/``read_drafter``),
its checks against the target and the training envelope (``train_drafter``) that records held-out agreement.

The held-out agreement (``heldout_top1_agreement_by_step``, which the quality gate and the report read): entry k - 1
is the share of held-out positions (16 windows, with the target's features) at which the drafter's top-1 token at
draft step k equals the target's top-1 token there. Each step is teacher-forced and not conditional on the earlier
steps: the tokens before the position are the held-out text's, not the drafter's earlier guesses, and every position
with k - 1 positions before it in its window counts, not only those where steps 1..k-1 agreed (what the drafter feeds
itself besides tokens, its own states or block slots, is its own, as when it drafts). So the entries need not fall
with k and their product is not the chance of accepting k tokens. One entry per step the family drafts in a chain
(unrolled steps, heads, block slots), at least one, each in [0, 1] (``checked_agreement``). The gate
``min_heldout_agreement`` reads step 1 alone (0.2 in workflow/config/default.yaml: a drafter whose first guess agrees
with the target at fewer than one position in five stops the run, unless ``allow_weak_models``).

Under ``torchrun --nproc_per_node N`` the processes train one drafter data-parallel: each draws its micro-batches
of every step's global batch (``batch_size * grad_accum * N`` rows), and only rank 0 goes on past training to
evaluate and write the drafter; the others end once training is done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import save_file
from torch import nn
from transformers import LlamaConfig, PretrainedConfig

from harness.errors import DraftcountError
from harness.training.drafter_contract import (
    AGREEMENT, AGREEMENT_BY_WINDOW, COMPONENTS, agreement_by_window, check_drafter, checked_agreement,
    parameter_components,
)
from harness.training import distributed
from harness.training.distributed import Shard
from harness.training.draft_vocab import MAP_WEIGHTS, DraftVocab, vocab_from_maps
from harness.training.features import FeatureSource, target_features
from harness.data.token_streams import even_windows, load_tokens
from harness.backend.models import LoadedModel, load_model
from harness.store.atomic import atomic_path
from harness.store.drafter_meta import META_FILE
from harness.store.files import load_weights, read_json
from harness.store.hub import drafter_snapshot, is_hub_id
from harness.store.records import environment
from harness.training.objectives import DEFAULT_OBJECTIVE, check_objective
from harness.training.flops import flop_counter
from harness.training.loop import TrainConfig, TrainResult, batches_from_step, check_warmup_fraction, train
from harness.training.zoo import save_directory
from harness.training.zoo_training import trained_on


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
    budget_tokens: int = 0  # > 0: the steps follow from this budget of supervised target positions (``budgeted``)
    heldout: Path | None = None  # a token stream to evaluate the drafter on
    device: str = "cpu"
    checkpoint: Path | None = None
    progress: bool = True
    by_window: bool = False  # the held-out agreement of each window too (drafter_contract.AGREEMENT_BY_WINDOW)


@dataclass(frozen=True)
class DrafterLoopOptions:
    """Training-loop options every drafter trainer takes; a method's options dataclass extends it."""

    batch_size: int = 8  # rows per micro-batch (per process)
    grad_accum: int = 1  # micro-batches per step and process: a step is batch_size * grad_accum * processes rows
    seq_len: int = 256
    lr: float = 1e-3
    warmup_steps: int = 20
    warmup_fraction: float = 0.0  # > 0: warm up for this share of the steps (harness.training.loop.TrainConfig)
    precision: Literal["fp32", "bf16"] = "fp32"
    seed: int = 0
    objective: str = DEFAULT_OBJECTIVE  # a name in harness.training.objectives.OBJECTIVES
    draft_vocab: int = 0  # N > 0: predict over the N most frequent training tokens (harness.training.draft_vocab)

    def __post_init__(self) -> None:
        check_objective(self.objective)
        if self.batch_size < 1 or self.grad_accum < 1:
            raise DraftcountError(f"batch_size and grad_accum must be >= 1, got {self.batch_size} and {self.grad_accum}")
        check_warmup_fraction(self.warmup_fraction)
        if self.draft_vocab < 0:
            raise DraftcountError(f"draft_vocab must be >= 0 (0: the target's whole vocabulary), got "
                                  f"{self.draft_vocab}")


def tokens_per_step(options) -> int:
    """Supervised target positions one optimizer step trains on, over every process: batch_size x grad_accum x
    processes rows of seq_len positions (a training-time-test unroll or a block of slots counts a position once)."""
    return options.batch_size * getattr(options, "grad_accum", 1) * distributed.world().size * options.seq_len


def budgeted(request: DrafterTrainRequest, options) -> DrafterTrainRequest:
    """``request`` with its steps derived from ``request.budget_tokens`` (when > 0): the fewest steps whose positions
    reach the budget, so drafters with different windows or batches train on the same number of positions."""
    if request.budget_tokens <= 0:
        return request
    return replace(request, steps=-(-request.budget_tokens // tokens_per_step(options)))


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
    if (tokens := load_tokens(data)).numel() <= seq_len:
        raise DraftcountError(f"training data {data}: {tokens.numel()} tokens do not fill one window of {seq_len}")
    return FeatureSource(layers=layers, seq_len=seq_len, target=target.model, tokens=tokens)


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

    ``module`` must have the methods of ``Drafter`` (``check_drafter``, before the first step). ``batch_loss`` must
    be a mean over the batch's rows, so that a global batch's loss is the mean of its micro-batches'. Under
    torchrun, a process other than rank 0 leaves (``SystemExit(0)``) once training is done: its drafter is rank 0's,
    which alone is evaluated and written.
    """
    check_drafter(module, request.method)

    def loss_fn(step: int, shard: Shard) -> tuple[torch.Tensor, int]:
        batch = batches_from_step(step, options.seed,
                                  lambda generator: shard_batch(source, options.batch_size, shard, generator))
        batch = {key: value.to(target.device) for key, value in batch.items()}
        return batch_loss(batch), batch["input_ids"].numel()

    config = TrainConfig(steps=request.steps, time_budget_s=request.time_budget_s, lr=options.lr,
                         warmup_steps=options.warmup_steps, warmup_fraction=options.warmup_fraction,
                         precision=options.precision, seed=options.seed,
                         grad_accum=options.grad_accum)
    fingerprint = {"method": request.method, "target": request.target, "data": str(request.data),
                   **fingerprint_options(options)}
    result = train(module, loss_fn, config, request.checkpoint, fingerprint, f"train {request.method} drafter",
                   request.progress, sharded=True)
    if source.dump_dir is not None:  # the features came from a dump: the target forwards that wrote them count too
        result = replace(result, flops=result.flops + dump_feature_flops(source, target, options) * result.steps)
    if distributed.world().size > 1:
        distributed.shutdown()
        if not distributed.is_main():
            raise SystemExit(0)
    return result


def fingerprint_options(options) -> dict:
    """A trainer's options as its checkpoint's fingerprint holds them: not how the global batch is split
    (grad_accum), and no warmup_fraction unless set (a checkpoint written before it existed resumes)."""
    return {key: value for key, value in asdict(options).items()
            if key != "grad_accum" and not (key == "warmup_fraction" and not value)}


def dump_feature_flops(source: FeatureSource, target: LoadedModel, options: DrafterLoopOptions) -> float:
    """The target's FLOPs for one step's features, had they been computed on the fly (a dump is written once and
    read by several drafters; each drafter's count includes them, so dumped and on-the-fly training compare)."""
    draws = torch.Generator(device="cpu").manual_seed(0)  # host: draws a dump's row numbers, as training does
    ids = shard_batch(source, options.batch_size, Shard(), draws)["input_ids"]
    with torch.no_grad(), flop_counter() as counter:
        target_features(target.model, ids.to(target.device), source.layers)
    return float(counter.get_total_flops()) * options.grad_accum * distributed.world().size


def heldout_batch(heldout: torch.Tensor, target: LoadedModel, layers: list[int | str],
                  seq_len: int) -> dict[str, torch.Tensor]:
    """16 evenly spaced held-out windows with the target's features, to evaluate a drafter on."""
    windows = even_windows(heldout, 16, seq_len).to(target.device)
    return {"input_ids": windows, **target_features(target.model, windows, layers)}


def drafter_provenance(request: DrafterTrainRequest, result: TrainResult) -> dict:
    return {"target": request.target, "data": str(request.data), "train_steps": result.steps,
            "train_tokens": result.tokens, "train_flops": result.flops,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **environment()}


def write_metrics(path: Path, metrics: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=2, default=str) + "\n")


# The drafter kit: a drafter directory (weights, metadata, a config), its checks against the target, and the
# training envelope every family runs in. A family keeps its network, its loss and a few lines of save/load.

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # ours, and the .bin some released heads ship


@dataclass(frozen=True)
class DrafterFiles:
    """What a drafter directory holds: its metadata (empty for a released head without ours), its weights
    (a leading ``model.`` stripped from their names; the draft-vocabulary map taken out into ``maps``) and its
    config.json's fields (None without one)."""

    directory: Path
    meta: dict
    state: dict[str, torch.Tensor]
    config_fields: dict | None
    maps: dict[str, torch.Tensor] = field(default_factory=dict)

    def draft_vocab(self, target_vocab: int, label: str) -> DraftVocab:
        """The drafter's draft vocabulary (``d2t``/``t2d``; none: the full vocabulary), checked against the
        target's vocabulary."""
        return vocab_from_maps(self.maps, target_vocab, label)

    def llama_config(self) -> LlamaConfig:
        """config.json as a Llama configuration (a drafter's layers are Llama layers whatever its model type)."""
        if self.config_fields is None:
            raise DraftcountError(f"drafter directory {self.directory} holds no config.json")
        return LlamaConfig(**{key: value for key, value in self.config_fields.items() if key != "model_type"})


def drafter_directory(source: str | Path) -> Path:
    """A local drafter directory, or a hub id's files fetched into the hub cache."""
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
            state = load_weights(path, "drafter weights")
            return {key.removeprefix("model."): value for key, value in state.items()}
    raise DraftcountError(f"drafter directory {directory} holds no weights ({' or '.join(WEIGHT_FILES)})")


def write_drafter(out_dir: Path, method: str, state: dict[str, torch.Tensor], meta: dict,
                  config: PretrainedConfig | None = None, vocab: DraftVocab | None = None) -> None:
    """``model.safetensors`` (``state`` on the CPU, and a reduced draft ``vocab``'s ``d2t``/``t2d``),
    ``draftcount_drafter.json`` (``method`` + ``meta``, and the vocabulary's size) and, given one, ``config.json``;
    each file written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if config is not None:
        config.save_pretrained(out_dir)
    if vocab is not None and vocab.reduced:
        state, meta = {**state, **vocab.maps()}, {**meta, **vocab.describe()}
    weights = {name: tensor.detach().cpu().contiguous() for name, tensor in state.items()}
    with atomic_path(out_dir / WEIGHT_FILES[0]) as partial:
        save_file(weights, str(partial))
    with atomic_path(out_dir / META_FILE) as partial:
        partial.write_text(json.dumps({"method": method, **meta}, indent=2, default=str) + "\n")


def read_drafter(source: str | Path, method: str, meta_required: bool = True, with_config: bool = True) -> DrafterFiles:
    """A drafter directory trained for ``method`` (``meta_required=False``: also a released one without our
    metadata; ``with_config``: it must hold a config.json); one line when it holds none, lacks a file or was
    trained for another method."""
    directory = drafter_directory(source)
    meta_path = directory / META_FILE
    if meta_path.is_file():
        meta = read_json(meta_path, "drafter metadata")
    elif meta_required:
        raise DraftcountError(f"drafter directory {directory} holds no {method} drafter (no {META_FILE}; "
                              f"python -m harness train --method {method} writes one)")
    else:
        meta = {}
    if meta.get("method", method) != method:
        raise DraftcountError(f"drafter {directory} was trained for method {meta['method']!r}, not {method!r}")
    config = directory / "config.json"
    if with_config and not config.is_file():
        raise DraftcountError(f"drafter directory {directory} holds no config.json")
    fields = read_json(config, "drafter config") if with_config else None
    state = read_weights(directory)
    maps = {name: state.pop(name) for name in MAP_WEIGHTS if name in state}
    return DrafterFiles(directory, meta, state, fields, maps)


def check_target_fit(label: str, width: int, vocab: int, target: nn.Module) -> None:
    """A drafter built for ``width`` and ``vocab`` fits ``target`` (one line naming both otherwise)."""
    embedding = target.get_input_embeddings().weight
    if (width, vocab) != (int(embedding.shape[1]), int(embedding.shape[0])):
        raise DraftcountError(f"{label} was built for width {width} and vocabulary {vocab}; the target has "
                              f"{int(embedding.shape[1])} and {int(embedding.shape[0])}")


def check_weights(module: nn.Module, state: dict[str, torch.Tensor], label: str,
                  optional: frozenset[str] = frozenset()) -> None:
    """Every weight ``module`` needs is in ``state`` (but ``optional``), nothing else is, every shape fits."""
    expected = {name: tuple(tensor.shape) for name, tensor in module.state_dict().items()}
    missing = sorted(set(expected) - set(state) - optional)
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        parts = ([f"missing weights {', '.join(missing[:6])}"] if missing else []) + (
            [f"unexpected weights {', '.join(unexpected[:6])}"] if unexpected else [])
        raise DraftcountError(f"{label}: {'; '.join(parts)}")
    wrong = [f"{name} {tuple(state[name].shape)} (expected {expected[name]})"
             for name in sorted(state) if tuple(state[name].shape) != expected[name]]
    if wrong:
        raise DraftcountError(f"{label}: weights of the wrong shape: {', '.join(wrong[:4])}")


@dataclass
class Fitted:
    """What a family's fit returns: the trained module, its training run and metrics of its own."""

    module: nn.Module
    result: TrainResult
    metrics: dict = field(default_factory=dict)


def train_drafter(request: DrafterTrainRequest, options: DrafterLoopOptions, target: LoadedModel,
                  source: FeatureSource, fit: Callable[[], Fitted],
                  agreement: Callable[[nn.Module, dict[str, torch.Tensor]], list[float]],
                  save: Callable[[nn.Module, Path, dict], None],
                  calibrate: Callable[[nn.Module, dict[str, torch.Tensor]], dict] | None = None) -> dict:
    """The envelope every drafter family trains in: ``fit()``, then the metrics (method, parameters, options, the
    training run, its draft vocabulary, the family's own), the held-out top-1 agreement per draft step on
    ``--heldout`` (``agreement`` over 16 windows with the target's features; with a draft vocabulary also its
    coverage of the held-out tokens) and ``save(module, directory, provenance)`` into ``request.out``
    atomically. A family's ``calibrate`` reads the same held-out windows; what it returns joins the metrics and
    the drafter's metadata (Medusa's per-rank accuracies, say). Returns the metrics."""
    fitted = fit()
    module = fitted.module
    check_drafter(module, request.method)  # a fit without fit_drafter: at least before anything is evaluated
    vocab = getattr(module, "draft_vocab", None)
    metrics = {"method": request.method, "trainable_parameters": module.trainable_parameters(),
               COMPONENTS: parameter_components(module), "options": asdict(options), "train": fitted.result.as_dict(),
               "target": request.target,
               "data": str(request.data), **(vocab.describe() if vocab is not None else {}), **fitted.metrics,
               "trained_on": trained_on(str(target.device))}  # the report's models table names the CPU type
    calibration = {}
    if request.heldout is not None:
        heldout = load_tokens(request.heldout)
        batch = heldout_batch(heldout, target, source.layers, options.seq_len)
        metrics[AGREEMENT] = checked_agreement(request.method, agreement(module, batch))
        if request.by_window:
            metrics[AGREEMENT_BY_WINDOW] = agreement_by_window(request.method, agreement, module, batch)
        if vocab is not None and vocab.reduced:
            metrics["heldout_vocabulary_coverage"] = vocab.coverage(heldout)
        calibration = calibrate(module, batch) if calibrate is not None else {}
    metrics.update(calibration)
    provenance = {**drafter_provenance(request, fitted.result), **calibration}
    save_directory(request.out, lambda path: save(module.cpu(), path, provenance))
    return metrics


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
