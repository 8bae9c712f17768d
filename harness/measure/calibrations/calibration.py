"""What the shape calibrations share (``harness.measure.calibrations.tree_shape`` for the beam drafters,
``chain_length`` for the chain drafters): a run of the method at its largest shape over calibration prompts, its costs
per verification step by phase, and the target's latency curve anchored to that run.

Each cost per step is the median over prompts of the prompt's mean. (Medians over single steps, read from the phase
clock at every commit, were tried and chose worse beside a CPU-bound process: a long step is preempted more often
than a short one, so the median step of a long chain is a preempted one.)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from harness.backend.models import LoadedModel
from harness.data.prompts import Prompt, encode_turn
from harness.engine.adapter import DraftAdapter
from harness.engine.counters import GenerationCounters
from harness.engine.loop import generate
from harness.errors import DraftcountError
from harness.store.atomic import atomic_path
from harness.verify.sampling import SamplingConfig, make_generator


def latency_at(latency: dict[str, float], size: int) -> float:
    """The target's forward seconds over ``size`` tokens, interpolated between the measured sizes, each size at least
    as slow as every smaller one (a forward over more tokens costs no less: a smaller figure is noise)."""
    sizes = np.array(sorted(int(key) for key in latency))
    return float(np.interp(size, sizes, np.maximum.accumulate([latency[str(key)] for key in sizes])))


@dataclass(frozen=True)
class StepCosts:
    """Seconds per verification step of a calibration run, by phase, and the tokens a step verified."""

    drafter: float
    rest: float  # host + verification
    target: float = 0.0  # the target's forward (0: not measured, e.g. read back from a shape file)
    verified_tokens: float = 0.0


@dataclass
class Calibration:
    step_ranks: list[np.ndarray] = field(default_factory=list)
    steps: int = 0
    drafter_seconds: float = 0.0
    rest_seconds: float = 0.0  # host + verification
    prompt_costs: list[tuple[int, float, float, float, int]] = field(default_factory=list)
    # per prompt and round: (steps, drafter s, rest s, target s, tokens verified)
    recording: bool = True  # False while a repeated round runs (its drafts were recorded in the first)

    def add_prompt(self, counters: GenerationCounters, prompt_tokens: int) -> None:
        """One calibration prompt's steps and phase times (``prompt_tokens``: its prefill, which the target's
        tally holds too)."""
        phases, steps = counters.phase_seconds, len(counters.step_accepted)
        rest = phases["host"] + phases["verify"]
        if self.recording:
            self.steps += steps
            self.drafter_seconds += phases["drafter"]
            self.rest_seconds += rest
        if steps:
            self.prompt_costs.append((steps, phases["drafter"], rest, phases["target"],
                                      counters.target.tokens - prompt_tokens))

    def per_step(self) -> StepCosts:
        """Seconds per step by phase: the median over prompts of each prompt's mean, so that a busy spell during a
        few prompts does not move them; the totals' mean where no prompt was recorded (a shape file's)."""
        if not self.prompt_costs:
            steps = max(self.steps, 1)
            return StepCosts(self.drafter_seconds / steps, self.rest_seconds / steps)
        costs = np.array(self.prompt_costs, dtype=float)
        verified = float(costs[:, 4].sum() / costs[:, 0].sum())
        drafter, rest, target = np.median(costs[:, 1:4] / costs[:, :1], axis=0)
        return StepCosts(float(drafter), float(rest), float(target), verified)


def anchored_latency(latency: dict[str, float], costs: StepCosts) -> dict[str, float]:
    """``latency`` (the target's forward per size, measured apart) scaled so that its value at the calibration's
    verified size equals the calibration run's own target seconds per step: the curve's shape comes from the
    latency file, its level from the run that measured the drafter and the rest of a step, so a machine that was
    slower (busier) during one measurement than during the other scales every cost alike and moves no choice.
    Unchanged when the run's target time is unknown."""
    if costs.target <= 0 or costs.verified_tokens <= 0:
        return latency
    scale = costs.target / latency_at(latency, costs.verified_tokens)
    return {size: seconds * scale for size, seconds in latency.items()}


def calibration_runs(target: LoadedModel, adapter: DraftAdapter, prompts: list[Prompt], temperature: float,
                     max_new_tokens: int, calibration: Calibration, progress: bool, desc: str,
                     repeats: int = 1) -> Iterator[GenerationCounters]:
    """Generate each calibration prompt's first turn with ``adapter`` (seeded per prompt, as a bench run is),
    recording its steps and phase times in ``calibration``; yields each prompt's counters. With ``repeats`` > 1 the
    prompts run that many rounds (the same drafts: the same seeds), every round's times recorded, the counters of
    the first round yielded (``calibration.recording`` is True during it): a busy spell falls on one round's
    prompts, and the medians keep the others."""
    sampling = SamplingConfig(temperature)
    rounds = [(repeat, index, prompt) for repeat in range(repeats) for index, prompt in enumerate(prompts)]
    for repeat, index, prompt in tqdm(rounds, desc=desc, disable=not progress):
        calibration.recording = repeat == 0
        ids = torch.tensor([encode_turn(target.tokenizer, [], prompt.turns[0])])  # host: prompt ids, moved by generate
        counters = generate(target, adapter, ids, max_new_tokens, sampling,
                            generator=make_generator(index, target.device)).counters
        calibration.add_prompt(counters, ids.shape[1])
        if repeat == 0:
            yield counters
    calibration.recording = True


def add_calibration_arguments(parser: argparse.ArgumentParser) -> None:
    """What both calibrations (tree-shape, chain-length) take beside the method and its shape range."""
    parser.add_argument("--prompts", required=True, help="calibration prompts (JSONL; not the benchmark's)")
    parser.add_argument("--latency", required=True, type=Path, help="target latency per size (rule measure_latency)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--opt", action="append", metavar="KEY=VALUE", help="the method's other options")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--limit", type=int, help="calibration prompts used (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over the prompts, timed (default 3; medians)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, help="torch threads (the bench jobs': bench.threads)")
    parser.add_argument("--no-progress", action="store_true")


def read_calibration_latency(args: argparse.Namespace) -> dict[str, float]:
    """The target's latency per size from ``--latency`` (after setting ``--threads``); one line if it is missing."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.latency.is_file():
        raise DraftcountError(f"no latency file {args.latency} (rule measure_latency writes it)")
    return json.loads(args.latency.read_text())["target"]


def largest_reached(chosen: dict, largest: dict[str, int]) -> list[str]:
    """The dimensions (``largest``: chosen field -> the calibration's largest value) where the choice sits at the
    largest value calibrated: there a larger shape, never measured, may have been faster."""
    return [name for name, value in largest.items() if int(chosen[name]) >= value]


def write_choice(args: argparse.Namespace, method_fields: dict, chosen: dict, calibration: Calibration,
                 ranges: dict, says: str, largest: dict[str, int] | None = None) -> None:
    """Write a calibration's choice to ``--out`` (what the method reads, with every estimate and where they came
    from) and say it in one line (``says``: the shape chosen); a warning when it sits at the largest shape
    calibrated (``largest_reached``), recorded as ``at_largest``."""
    edges = largest_reached(chosen, largest or {})
    if edges:
        print(f"warning: {args.method} at T={args.temperature:g} chose the largest {' and '.join(edges)} calibrated "
              f"({says}): a larger one may be faster; raise the calibration's maximum", file=sys.stderr)
    result = {"method": args.method, **method_fields, "temperature": args.temperature, **chosen, "at_largest": edges,
              "calibration": {"prompts": args.prompts, "steps": calibration.steps, **ranges,
                              "repeats": args.repeats, "latency": str(args.latency)}}
    with atomic_path(args.out) as partial:
        partial.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{args.method} at T={args.temperature:g}: {says} ({chosen['accepted_per_step']:.2f} accepted/step, "
          f"estimated {chosen['estimated_tokens_per_s']:.1f} tokens/s, {chosen['estimated_speedup']:.2f}x ar) from "
          f"{calibration.steps} calibration steps")
