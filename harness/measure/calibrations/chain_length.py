"""Latency-aware chain length for the chain drafters with a tunable length (options extending
``harness.trees.chain_shape.ChainOptions``: sd's gamma, pard's k, dflash's verify_length): the length that
maximises estimated tokens per second on this machine, by the rule the beam drafters' tree shape follows
(``harness.measure.calibrations.tree_shape``).

A chain's drafts do not depend on its length (sd drafts autoregressively; pard's draft j sees the accepted text and
j masks only; dflash drafts its whole block and verifies a prefix), so one calibration run at the longest chain
(``--max-length``, or the adapter's longest where that is shorter: dflash's block drafts block_size - 1) tells
what every shorter one would have accepted: a step that accepted a drafts at length L_max accepts min(a, L) at
length L (exact for greedy verification; at T > 0 an estimate, as the tree shape's is). Costs, measured on this
machine: the target's forward over L + 1 tokens (``tree/latency.json``, monotone in L), the drafter's seconds per
step and the rest of a step (host and verification) from the calibration run, medians over prompts, the latency
curve anchored to the run's own target time (``anchored_latency``). The drafter's time scales with its forwards: a
step at L_max ran F forwards (sd: about L_max, pard: one), a step at L runs 1 + (F - 1)(L - 1)/(L_max - 1).
Estimated tokens/s for L: (1 + accepted(L)) / (target(L + 1) + drafter(L) + rest); the chosen length is the
shortest within 3% of the best estimate (``smallest_near_best``: a tie within the measurement's noise keeps the
shorter chain). The JSON file it writes is what `gamma: auto` and `k: auto` read (``length_file``).

    python -m harness measure chain-length --method sd --target work/models/target --draft work/models/draft \
        --prompts work/prompts/calibration.jsonl --latency work/tree/latency.json --out length.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from harness.backend.models import load_model
from harness.data.prompts import load_prompts
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.measure.calibrations.calibration import (Calibration, add_calibration_arguments, anchored_latency,
                                                      calibration_runs, latency_at, read_calibration_latency,
                                                      write_choice)
from harness.measure.calibrations.tree_shape import check_latency_sizes, smallest_near_best
from harness.options import parse_key_values
from harness.trees.chain_shape import chain_field, chain_methods


def accepted_by_length(step_accepted: list[int], max_length: int) -> np.ndarray:
    """(max_length,): mean accepted drafts per step of a chain of length L (entry L - 1), from the steps of a run at
    ``max_length``: a step that accepted a drafts accepts min(a, L)."""
    accepted = np.asarray(step_accepted, dtype=float)
    if accepted.size == 0:
        return np.zeros(max_length)
    return np.array([np.minimum(accepted, length).mean() for length in range(1, max_length + 1)])


def drafter_forwards(length: int, max_length: int, forwards_at_max: float) -> float:
    """Drafter forwards per step at ``length``, interpolated between one forward (length 1) and the
    ``forwards_at_max`` measured at ``max_length``."""
    if max_length == 1:
        return forwards_at_max
    return 1 + (forwards_at_max - 1) * (length - 1) / (max_length - 1)


def choose_length(accepted: np.ndarray, latency: dict[str, float], calibration: Calibration,
                  forwards_at_max: float) -> dict:
    """The chain length of highest estimated tokens/s (the shortest within the tie tolerance of it), with the
    estimate for every length."""
    max_length = len(accepted)
    costs = calibration.per_step()
    drafter, rest = costs.drafter, costs.rest
    latency = anchored_latency(latency, costs)  # the curve at the calibration run's level (tree_shape's rule)
    per_forward = drafter / max(forwards_at_max, 1e-9)
    estimates = np.array([(1 + accepted[length - 1]) / (latency_at(latency, length + 1) + rest + per_forward
                                                        * drafter_forwards(length, max_length, forwards_at_max))
                          for length in range(1, max_length + 1)])
    _, index = smallest_near_best(estimates[None, :])
    ar_rate = 1 / (latency_at(latency, 1) + rest)
    return {"length": index + 1, "estimated_tokens_per_s": float(estimates[index]),
            "estimated_speedup": float(estimates[index] / ar_rate), "accepted_per_step": float(accepted[index]),
            "drafter_seconds_per_step_at_max_length": drafter, "drafter_forwards_per_step_at_max_length":
            forwards_at_max, "rest_seconds_per_step": rest, "target_seconds_per_step": costs.target,
            "accepted_by_length": np.round(accepted, 4).tolist(),
            "tokens_per_s_by_length": np.round(estimates, 2).tolist()}


def calibrate_chain(method: str, options: dict, target_dir: str, draft_dir: str | None, drafter_dir: str | None,
                    prompts_path: str, temperature: float, max_new_tokens: int, limit: int | None, device: str,
                    dtype: str, progress: bool = True,
                    repeats: int = 1) -> tuple[Calibration, list[int], float, int]:
    """Generate the calibration prompts with the method at its longest chain: the calibration's step costs, the
    accepted drafts of every step, the drafter forwards per step and the longest chain the adapter drafts (its
    ``max_draft_nodes``: dflash's block may hold fewer drafts than the length asked)."""
    target = load_model(target_dir, dtype, device)
    draft = load_model(draft_dir, dtype, device) if draft_dir else None
    adapter, _ = build_adapter(method, options, BuildInputs(target, draft, Path(drafter_dir) if drafter_dir
                                                             else None))
    calibration, accepted, forwards = Calibration(), [], 0
    for counters in calibration_runs(target, adapter, load_prompts(prompts_path, None, limit), temperature,
                                     max_new_tokens, calibration, progress, f"calibrate {method}", repeats):
        accepted += counters.step_accepted
        forwards += counters.drafter.forwards
    return calibration, accepted, forwards / max(len(accepted), 1), adapter.max_draft_nodes


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", required=True, choices=chain_methods())
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", help="the draft LM (a method that runs one: sd)")
    parser.add_argument("--drafter", help="the method's trained drafter (pard, dflash)")
    add_calibration_arguments(parser)
    parser.add_argument("--max-length", type=int, default=8)
    args = parser.parse_args(argv)
    latency = read_calibration_latency(args)
    if args.max_length < 1:
        raise DraftcountError(f"--max-length must be >= 1, got {args.max_length}")
    check_latency_sizes(latency, args.max_length, str(args.latency), f"--max-length {args.max_length} needs")
    field = chain_field(args.method)
    options = {**parse_key_values(args.opt), field: args.max_length}
    calibration, accepted, forwards, longest = calibrate_chain(
        args.method, options, args.target, args.draft, args.drafter, args.prompts, args.temperature,
        args.max_new_tokens, args.limit, args.device, args.dtype, not args.no_progress,
        args.repeats)
    if not accepted:
        raise DraftcountError("the calibration run made no verification step (prompts too short?)")
    max_length = min(args.max_length, longest)  # no chain longer than the adapter drafts is estimated
    chosen = choose_length(accepted_by_length(accepted, max_length), latency, calibration, forwards)
    write_choice(args, {"field": field}, chosen, calibration, {"max_length": max_length},
                 f"{field} {chosen['length']}", {"length": max_length})
    return 0


if __name__ == "__main__":
    main()
