"""Latency-aware tree size for the beam-tree methods (those whose options extend
``harness.trees.beam_shape.BeamOptions``: eagle, lyanna, prism, owl): the depth and budget that maximise
estimated tokens per second on this machine.

EAGLE-2's tree (``harness.trees.beam``) expands the same frontiers whatever the budget, then keeps the budget's
best pool nodes by score; a shallower tree's pool is a prefix of a deeper one's. So one calibration run at the
largest shape (``--max-depth``, ``--max-budget``) tells, for every smaller (depth D, budget B), which of each
step's accepted nodes that tree would have held: node i of the accepted path is in it if its depth is at most D
and it ranks below B among the pool nodes of depth at most D. The accepted length under (D, B) is the longest
prefix of the path inside it (exact for greedy verification of the same drafts; at T > 0 an estimate: a
smaller tree also changes the residual distributions). This is the data Sequoia's rule uses (acceptance by depth
and rank), measured for the method's own drafter.

Costs, measured on this machine: the target's forward over B + 1 tokens (``tree/latency.json``, rule
measure_latency; made monotone in B), the drafter's time per step (the calibration run's drafter phase, scaled by
D / max depth) and the rest of a step (host and verification, from the same run; per step, the median over prompts). The
latency curve is anchored to the calibration run's own target seconds per step (``anchored_latency``): all costs
then come from one run's conditions, so a machine busier during one measurement than the other moves no choice.
Estimated tokens/s for (D, B):
(1 + accepted(D, B)) / (target(B + 1) + drafter x D / max_depth + rest); the chosen shape is the smallest within 3%
of the best estimate (a tie within the measurement's noise keeps the smaller tree). It goes to a JSON file
that the method reads with ``shape_file=`` (its depth and budget replace the options'). The file keeps the
acceptance table and the step costs, so the load study redoes the choice per batch size from the target's latency
per tokens in the batch (``shape_for_batch``) without a second calibration.

At T > 0 the calibration can also choose the drafting convention (``--drafts both``; ``harness.trees.beam``):
top-k children verified as q = 1 (EAGLE's) or children sampled without replacement carrying their q. Each is
calibrated as above (a sampled tree takes its draws in a fixed order: the ranks are those places, so the same
prefix rule holds) and the one of higher estimated tokens/s is chosen, top-k on a tie within ``TIE_TOLERANCE``;
the file records it (``drafts``, read by ``drafts: auto``) and both estimates (``by_drafts``).

    python -m harness measure tree-shape --method eagle --target work/models/target --drafter work/drafters/eagle \
        --prompts work/prompts/calibration.jsonl --latency work/tree/latency.json --out shape.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from harness.backend.models import load_model
from harness.data.prompts import load_prompts
from harness.measure.calibrations.calibration import (Calibration, add_calibration_arguments, anchored_latency,
                                                      calibration_runs, latency_at, read_calibration_latency,
                                                      write_choice)
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.trees.beam_shape import DEFAULT_DRAFTS, DRAFTS, beam_methods
from harness.options import parse_key_values



def pool_depths(top_k: int, depth: int) -> np.ndarray:
    """The depth of every pool node of a beam tree (pool order: k nodes of depth 1, then k x k per depth)."""
    return np.concatenate([np.ones(top_k, dtype=int)] + [np.full(top_k * top_k, level, dtype=int)
                                                          for level in range(2, depth + 1)])


def path_ranks(scores: np.ndarray, depths: np.ndarray, path: list[int], max_depth: int) -> np.ndarray:
    """(len(path), max_depth): each accepted pool node's rank among the pool nodes of depth <= D (best score
    first, ties to the earlier node, as the beam ranks them), for D = 1..max_depth; a large number where the
    node is deeper than D."""
    ranks = np.full((len(path), max_depth), np.iinfo(np.int64).max // 2, dtype=np.int64)
    for level in range(1, max_depth + 1):
        members = np.flatnonzero(depths <= level)
        order = members[np.argsort(-scores[members], kind="stable")]
        position = {int(node): rank for rank, node in enumerate(order)}
        for row, node in enumerate(path):
            if node in position:
                ranks[row, level - 1] = position[node]
    return ranks


def accepted_table(step_ranks: list[np.ndarray], max_depth: int, max_budget: int) -> np.ndarray:
    """(max_depth, max_budget): mean accepted draft tokens per step for depth D (row D - 1) and budget B
    (column B - 1): per step, the longest prefix of the accepted path whose nodes all rank below B."""
    table = np.zeros((max_depth, max_budget))
    budgets = np.arange(1, max_budget + 1)
    for ranks in step_ranks:
        for level in range(max_depth):
            inside = ranks[:, level][None, :] < budgets[:, None]  # (budgets, path nodes)
            table[level] += np.cumprod(inside, axis=1).sum(axis=1)
    return table / max(len(step_ranks), 1)


TIE_TOLERANCE = 0.03  # estimates this close to the best are one tie (the A/A control's +-3%): the smallest wins


def choose_shape(table: np.ndarray, latency: dict[str, float], calibration: Calibration, rows: int = 1) -> dict:
    """The (depth, budget) of highest estimated tokens/s (the smallest within ``TIE_TOLERANCE`` of it:
    ``smallest_near_best``), with the estimate for every shape considered.

    ``rows``: the batch size B, with ``latency`` the target's forward over B rows of each size (tokens per row;
    ``harness.measure.calibrations.latency.batch_latencies``). A step then verifies B trees in one forward; drafting and
    the rest of the step grow B-fold (the batched engine drafts and accepts row by row), and it emits B times the
    tokens: B (1 + accepted) / (target_B(budget + 1) + B (drafter x depth / max depth + rest))."""
    max_depth, max_budget = table.shape
    costs = calibration.per_step()
    drafter, rest = costs.drafter, costs.rest
    if rows == 1:  # the latency curve at the calibration run's level (a batch's latency has no such anchor)
        latency = anchored_latency(latency, costs)
    estimates = np.zeros_like(table)
    for level in range(1, max_depth + 1):
        for budget in range(1, max_budget + 1):
            seconds = latency_at(latency, budget + 1) + rows * (drafter * level / max_depth + rest)
            estimates[level - 1, budget - 1] = rows * (1 + table[level - 1, budget - 1]) / seconds
    level, budget = smallest_near_best(estimates)
    ar_rate = rows / (latency_at(latency, 1) + rows * rest)
    return {"depth": int(level + 1), "budget": int(budget + 1),
            "estimated_tokens_per_s": float(estimates[level, budget]),
            "estimated_speedup": float(estimates[level, budget] / ar_rate),
            "accepted_per_step": float(table[level, budget]),
            "drafter_seconds_per_step_at_max_depth": drafter, "rest_seconds_per_step": rest,
            "target_seconds_per_step": costs.target, "verified_tokens_per_step": costs.verified_tokens,
            "accepted_by_depth_and_budget": np.round(table, 4).tolist(),
            "tokens_per_s_by_depth_and_budget": np.round(estimates, 2).tolist()}


def smallest_near_best(estimates: np.ndarray, tolerance: float = TIE_TOLERANCE) -> tuple[int, int]:
    """The (depth, budget) index of the smallest shape, fewest nodes first then the shallowest, whose estimate is
    within ``tolerance`` of the best: on a flat optimum, measurement noise (a busy machine) does not pick the shape."""
    near = np.argwhere(estimates >= (1 - tolerance) * estimates.max())
    level, budget = min(near.tolist(), key=lambda index: (index[1], index[0]))
    return int(level), int(budget)


def shape_for_batch(shape: dict, latency: dict[str, float], rows: int) -> dict:
    """A tree-shape file's choice redone for batch size ``rows`` from the acceptance and step costs it recorded and
    the target's latency at that batch size (per tokens per row): the load study's tree size per B."""
    try:
        table = np.array(shape["accepted_by_depth_and_budget"], dtype=float)
        calibration = Calibration(steps=1, drafter_seconds=float(shape["drafter_seconds_per_step_at_max_depth"]),
                                  rest_seconds=float(shape["rest_seconds_per_step"]))
    except (KeyError, TypeError, ValueError) as error:
        raise DraftcountError(f"not a tree-shape file (measure tree-shape): it lacks {error}") from None
    check_latency_sizes(latency, table.shape[1], "the batch latency", "the tree-shape file's budgets need")
    return choose_shape(table, latency, calibration, rows)


def check_latency_sizes(latency: dict[str, float], max_budget: int, source: str, needs: str) -> None:
    """One line unless ``latency`` measures a tree of ``max_budget`` drafts and its root (``needs``: who needs it,
    with the verb)."""
    largest = max(int(size) for size in latency)
    if largest < max_budget + 1:
        raise DraftcountError(f"{source} measures sizes up to {largest}; {needs} {max_budget + 1}")


def calibrate(method: str, options: dict, target_dir: str, drafter_dir: str | None, prompts_path: str,
              temperature: float, max_new_tokens: int, limit: int | None, device: str, dtype: str,
              progress: bool = True, repeats: int = 1) -> tuple[Calibration, int]:
    """Generate the calibration prompts with the method at its largest shape; the accepted nodes' ranks per
    step and the phase times. Returns them and the beam's top_k."""
    target = load_model(target_dir, dtype, device)
    adapter, built = build_adapter(method, options, BuildInputs(target, None, Path(drafter_dir) if drafter_dir
                                                                else None))
    shape = adapter.shape
    depths = pool_depths(shape.top_k, shape.depth)
    calibration = Calibration()
    original_commit = adapter.commit

    def commit(ctx, tree, verdict, target_out):
        beam = adapter.beam
        if beam is None or not calibration.recording:  # a step drafted otherwise (owl's HOWL: a retrieved
            return original_commit(ctx, tree, verdict, target_out)  # chain) tells nothing; a repeat, nothing new
        path = [beam.pool_of_node[node] for node in verdict.path[1:]]
        priority = beam.pool_priority.float().cpu().numpy()  # a sampled tree grows only the depths its budget fills
        calibration.step_ranks.append(path_ranks(priority, depths[: priority.shape[0]], path, shape.depth))
        original_commit(ctx, tree, verdict, target_out)

    adapter.commit = commit
    for _ in calibration_runs(target, adapter, load_prompts(prompts_path, None, limit), temperature, max_new_tokens,
                              calibration, progress, f"calibrate {method}", repeats):
        pass
    return calibration, shape.top_k


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", required=True, choices=beam_methods())
    parser.add_argument("--target", required=True)
    parser.add_argument("--drafter", required=True, help="the method's trained drafter")
    add_calibration_arguments(parser)
    parser.add_argument("--max-depth", type=int, default=8)
    parser.add_argument("--max-budget", type=int, default=64)
    parser.add_argument("--drafts", choices=[*DRAFTS, "both"],
                        help="the drafting convention at T > 0 (harness.trees.beam): one, or both calibrated and the "
                             "faster estimate chosen; default: --opt drafts, else topk (T = 0: greedy, topk)")
    args = parser.parse_args(argv)
    latency = read_calibration_latency(args)
    check_latency_sizes(latency, args.max_budget, str(args.latency), f"--max-budget {args.max_budget} needs")
    options = {**parse_key_values(args.opt), "depth": args.max_depth, "budget": args.max_budget}
    estimates = {}
    for drafts in conventions(args.drafts, options.get("drafts", "auto"), args.temperature):
        calibration, top_k = calibrate(args.method, {**options, "drafts": drafts}, args.target, args.drafter,
                                       args.prompts, args.temperature, args.max_new_tokens, args.limit, args.device,
                                       args.dtype, not args.no_progress, args.repeats)
        if not calibration.step_ranks:
            raise DraftcountError("the calibration run made no verification step (prompts too short?)")
        table = accepted_table(calibration.step_ranks, args.max_depth, args.max_budget)
        estimates[drafts] = (choose_shape(table, latency, calibration), calibration)
    drafts = faster_convention({name: chosen for name, (chosen, _) in estimates.items()})
    chosen, calibration = estimates[drafts]
    by_drafts = {name: {key: other[key] for key in ("depth", "budget", "estimated_tokens_per_s", "accepted_per_step")}
                 for name, (other, _) in estimates.items()}
    write_choice(args, {"top_k": top_k, "drafts": drafts}, {**chosen, "by_drafts": by_drafts}, calibration,
                 {"max_depth": args.max_depth, "max_budget": args.max_budget},
                 f"depth {chosen['depth']}, budget {chosen['budget']}, {drafts} drafts",
                 {"depth": args.max_depth, "budget": args.max_budget})
    return 0


def conventions(asked: str | None, option: str, temperature: float) -> list[str]:
    """The drafting conventions to calibrate: at T = 0 top-k alone (greedy: both are the same), else ``asked``
    (``both``: each), else the method's ``drafts`` option, else top-k."""
    if temperature <= 0:
        return [DEFAULT_DRAFTS]
    if asked == "both":
        return list(DRAFTS)
    return [asked or (option if option in DRAFTS else DEFAULT_DRAFTS)]


def faster_convention(chosen: dict[str, dict]) -> str:
    """The convention whose chosen shape has the higher estimated tokens/s (top-k on a tie within
    ``TIE_TOLERANCE``: today's convention unless the other is clearly faster)."""
    best = max(estimate["estimated_tokens_per_s"] for estimate in chosen.values())
    return next(name for name in (DEFAULT_DRAFTS, *DRAFTS) if name in chosen
                and chosen[name]["estimated_tokens_per_s"] >= (1 - TIE_TOLERANCE) * best)


if __name__ == "__main__":
    main()
