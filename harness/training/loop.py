"""The shared training loop: AdamW, warmup + cosine, grad clipping, bf16/fp32, seeding,
a progress bar with loss and tokens/s, resumable checkpoints and a time budget.

Used for the zoo's target and draft LMs and for the trained drafters. The
learning-rate schedule runs on progress = max(step / steps, elapsed / budget),
so it decays to its floor whichever limit is hit first. Checkpoints are written
to a temporary file and renamed, so a killed run never leaves a half-written
checkpoint; a checkpoint made under another configuration is not resumed.
A step whose loss or gradient norm is not finite is skipped (no update) and
counted; ``max_nonfinite_steps`` of them in a row stop training with an error.

Each optimizer step sums ``grad_accum`` micro-batches per process; under ``torchrun`` the processes draw disjoint
micro-batches of the same global batch and sum their gradients (harness/training/distributed.py), so the step
equals one over the whole global batch. Only rank 0 shows progress and writes checkpoints; the time-budget stop
is agreed by all processes, so they always take the same steps.
"""

from __future__ import annotations

import json
import math
import random
import time
from contextlib import nullcontext
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from harness.store.atomic import atomic_path
from harness.errors import DraftcountError
from harness.training import distributed
from harness.training.distributed import Shard
from harness.training.flops import flop_counter


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    time_budget_s: float = 0.0  # 0 = no limit
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    warmup_fraction: float = 0.0  # > 0: warm up for this share of the steps instead (one schedule shape, any budget)
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    precision: str = "fp32"  # fp32 | bf16 (autocast)
    seed: int = 0
    checkpoint_every_s: float = 60.0
    log_every: int = 10
    max_nonfinite_steps: int = 20  # consecutive non-finite steps (each skipped) before training stops with an error
    grad_accum: int = 1  # micro-batches summed into each optimizer step, per process

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise DraftcountError(f"steps must be >= 0, got {self.steps}")
        if self.precision not in ("fp32", "bf16"):
            raise DraftcountError(f"precision must be fp32 or bf16, got {self.precision!r}")
        if self.max_nonfinite_steps < 1:
            raise DraftcountError(f"max_nonfinite_steps must be >= 1, got {self.max_nonfinite_steps}")
        if self.grad_accum < 1:
            raise DraftcountError(f"grad_accum must be >= 1, got {self.grad_accum}")
        check_warmup_fraction(self.warmup_fraction)

    @property
    def warmup(self) -> int:
        """Warmup steps: ``warmup_fraction`` of the steps (at least one) when given, else ``warmup_steps``."""
        return max(1, round(self.warmup_fraction * self.steps)) if self.warmup_fraction > 0 else self.warmup_steps


def check_warmup_fraction(fraction: float) -> None:
    if not 0 <= fraction < 1:
        raise DraftcountError(f"warmup_fraction must be in [0, 1), got {fraction}")


@dataclass
class TrainResult:
    steps: int
    seconds: float
    tokens: int
    final_loss: float
    resumed_from_step: int
    stopped_by: str  # steps | time_budget
    skipped_steps: int = 0  # updates skipped because the loss or gradient norm was not finite
    losses: list[float] = field(default_factory=list)  # per step: the global batch's loss (NaN: not recorded)
    flops: float = 0.0  # forward and backward FLOPs of every step, all processes (harness.training.flops)

    def as_dict(self) -> dict:
        return asdict(self)


def learning_rate(config: TrainConfig, step: int, elapsed_s: float) -> float:
    """Linear warmup, then cosine decay to lr * min_lr_ratio over max(step progress, time progress)."""
    warmup = config.warmup
    if step < warmup:
        return config.lr * (step + 1) / warmup
    decay_steps = config.steps - warmup
    progress = (step - warmup) / decay_steps if decay_steps > 0 else 1.0
    if config.time_budget_s > 0:
        progress = max(progress, elapsed_s / config.time_budget_s)
    progress = min(progress, 1.0)
    floor = config.lr * config.min_lr_ratio
    return floor + 0.5 * (config.lr - floor) * (1 + math.cos(math.pi * progress))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def _save_checkpoint(path: Path, state: dict) -> None:
    with atomic_path(path) as partial:
        torch.save(state, partial)


def _load_checkpoint(path: Path | None, fingerprint: str) -> dict | None:
    if path is None or not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # an unreadable checkpoint is never trusted
        print(f"ignoring unreadable checkpoint {path}: {error}")
        return None
    if state.get("fingerprint") != fingerprint:
        print(f"ignoring checkpoint {path}: it was made with another configuration")
        return None
    return state


def _run_key(config: TrainConfig, world_size: int, fingerprint: dict | None) -> str:
    """What a checkpoint must have been made under to be resumed. Any split of the same global batch over
    processes and accumulation is the same run; a run of one micro-batch per step (and no warmup_fraction) has the
    key it had before grad_accum (and warmup_fraction) existed."""
    settings = asdict(config)
    micro_batches = settings.pop("grad_accum") * world_size
    if micro_batches > 1:
        settings["micro_batches"] = micro_batches
    if not settings["warmup_fraction"]:  # the key it had before warmup_fraction existed
        del settings["warmup_fraction"]
    return json.dumps({"train": settings, **(fingerprint or {})}, sort_keys=True, default=str)


def _accumulate(loss_fn: Callable, step: int, shards: list[Shard], sharded: bool,
                autocast: torch.autocast) -> tuple[torch.Tensor, int]:
    """Backpropagate this process's micro-batches of ``step``, each loss scaled by 1 / (micro-batches in the
    global batch); their scaled losses summed (detached) and their token count."""
    total, tokens = None, 0
    for shard in shards:
        with autocast:
            loss, count = loss_fn(step, shard) if sharded else loss_fn(step)
        if shard.count > 1:
            loss = loss / shard.count
        loss.backward()
        total = loss.detach().double() if total is None else total + loss.detach().double()
        tokens += count
    return total, tokens


def train(
    module: torch.nn.Module,
    loss_fn: Callable[[int], tuple[torch.Tensor, int]] | Callable[[int, Shard], tuple[torch.Tensor, int]],
    config: TrainConfig,
    checkpoint: Path | None = None,
    fingerprint: dict | None = None,
    description: str = "train",
    progress: bool = True,
    sharded: bool = False,
) -> TrainResult:
    """Train the trainable parameters of ``module``.

    ``loss_fn(step)`` returns the loss of that step's batch and its token count;
    it must pick its batch from ``step`` alone (so a resumed run sees the same
    data). With ``sharded``, ``loss_fn(step, shard)`` returns those of micro-batch
    ``shard`` of the step's global batch (a mean over its rows, so that the global
    batch's loss is the mean of its micro-batches'); only such a loss can
    accumulate gradients or train in several processes. ``fingerprint``
    identifies the configuration a checkpoint belongs to.
    """
    place = distributed.world()
    if not sharded and config.grad_accum * place.size > 1:
        raise DraftcountError(f"{description} draws whole batches: it cannot accumulate gradients (grad_accum "
                              f"{config.grad_accum}) or train in {place.size} processes")
    seed_everything(config.seed)
    parameters = [p for p in module.parameters() if p.requires_grad]
    decay = [p for p in parameters if p.dim() >= 2]
    no_decay = [p for p in parameters if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr, betas=(0.9, 0.95),
    )
    device_type = next(module.parameters()).device.type
    distributed.init(device_type)
    print_key = _run_key(config, place.size, fingerprint)
    state = _load_checkpoint(checkpoint, print_key)
    start_step, elapsed_before, tokens, last_loss = 0, 0.0, 0, float("nan")
    skipped, nonfinite_run = 0, 0  # updates skipped for a non-finite loss/gradient; how many in a row now
    losses: list[float] = []
    step_flops = 0.0  # one step's FLOPs over all processes, counted on this run's first step
    if state is not None:
        module.load_state_dict(state["module"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        start_step, elapsed_before, tokens, last_loss = state["step"], state["elapsed"], state["tokens"], state["loss"]
        skipped = state.get("skipped", 0)
        step_flops = state.get("step_flops", 0.0)
        losses = list(state.get("losses", [float("nan")] * start_step))
        if place.is_main:
            print(f"resuming {description} from step {start_step} ({elapsed_before:.0f}s done)")
    if not distributed.same_everywhere(start_step):
        raise DraftcountError(f"{description}: the processes resumed from different steps; "
                              f"give them all the same checkpoint file")
    distributed.broadcast_parameters(parameters)

    shards = distributed.step_shards(place, config.grad_accum)
    autocast = torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.precision == "bf16")
    started = time.perf_counter()
    last_checkpoint = started
    step = start_step
    stopped_by = "steps"
    module.train()
    bar = tqdm(total=config.steps, initial=start_step, desc=description, unit="step",
               disable=not (progress and place.is_main), dynamic_ncols=True)
    window_tokens, window_start = 0, time.perf_counter()
    try:
        while step < config.steps:
            elapsed = elapsed_before + time.perf_counter() - started
            if config.time_budget_s > 0:
                elapsed = distributed.agree_max(elapsed)  # one clock for all processes: same schedule, same stop
                if elapsed >= config.time_budget_s:
                    stopped_by = "time_budget"
                    break
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step, elapsed)
            optimizer.zero_grad(set_to_none=True)
            counting = step == start_step  # every step has the same shapes: the first one's count stands for all
            with flop_counter() if counting else nullcontext() as counter:
                loss, batch_tokens = _accumulate(loss_fn, step, shards, sharded, autocast)
            if counting:
                step_flops = float(counter.get_total_flops()) * place.size
            distributed.sum_gradients(parameters)
            stats = torch.stack([loss, torch.tensor(float(batch_tokens), dtype=torch.float64, device=loss.device)])
            distributed.sum_over_processes([stats])
            grad_norm = torch.nn.utils.clip_grad_norm_(parameters, config.grad_clip if config.grad_clip > 0
                                                       else math.inf)
            # the step's one host read: a non-finite loss or gradient skips the update (it would poison the weights)
            last_loss, step_tokens, last_norm = torch.cat([stats, grad_norm.double().reshape(1)]).tolist()
            step += 1
            losses.append(last_loss)
            tokens += int(step_tokens)
            window_tokens += int(step_tokens)
            bar.update(1)
            if math.isfinite(last_loss) and math.isfinite(last_norm):
                optimizer.step()
                nonfinite_run = 0
            else:
                skipped += 1
                nonfinite_run += 1
                if nonfinite_run >= config.max_nonfinite_steps:
                    raise DraftcountError(
                        f"{description} diverged: the loss or gradient norm was not finite for {nonfinite_run} "
                        f"steps in a row (up to step {step}, loss {last_loss}, gradient norm {last_norm}); "
                        f"lower the learning rate (lr {config.lr:g}) or raise warmup_steps")
            if step % config.log_every == 0:
                now = time.perf_counter()
                postfix = {"loss": f"{last_loss:.3f}", "tok_s": f"{window_tokens / (now - window_start):.0f}",
                           "lr": f"{optimizer.param_groups[0]['lr']:.2e}"}
                if config.time_budget_s > 0:
                    postfix["budget_left_s"] = f"{max(0.0, config.time_budget_s - elapsed):.0f}"
                bar.set_postfix(postfix)
                window_tokens, window_start = 0, now
            if (place.is_main and checkpoint is not None
                    and time.perf_counter() - last_checkpoint >= config.checkpoint_every_s):
                _save_checkpoint(checkpoint, {
                    "fingerprint": print_key, "module": module.state_dict(), "optimizer": optimizer.state_dict(),
                    "torch_rng": torch.get_rng_state(), "step": step, "tokens": tokens, "loss": last_loss,
                    "skipped": skipped, "losses": losses, "step_flops": step_flops,
                    "elapsed": elapsed_before + time.perf_counter() - started,
                })
                last_checkpoint = time.perf_counter()
    finally:
        bar.close()
    module.eval()
    return TrainResult(
        steps=step, seconds=elapsed_before + time.perf_counter() - started, tokens=tokens, final_loss=last_loss,
        resumed_from_step=start_step, stopped_by=stopped_by, skipped_steps=skipped, losses=losses,
        flops=step_flops * step,
    )


def batches_from_step(step: int, seed: int, sampler: Callable[[torch.Generator], torch.Tensor]) -> torch.Tensor:
    """A step's batch from a generator seeded by (seed, step): the same batch after a resume."""
    generator = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + step)  # host: draws the batch's host data
    return sampler(generator)
