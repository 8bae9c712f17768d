"""A data-driven static tree (STAND's): run a method with a large static tree on calibration prompts (held
apart from the benchmark's), count how often each node of the shape is accepted, keep the most accepted ones.

The method's adapter must draft over a static shape and count acceptances per shape node (attributes ``shape``
and ``accepted_per_shape_node``, as `stand` does). The tree is written as JSON (``parents`` plus the counts) for
the method's ``tree_file`` option.

    python -m harness measure static-tree --method stand --target DIR --prompts calib.jsonl --temperature 1 \\
        --opt branching=6,3,2,2,1,1,1,1,1,1 --nodes 24 --out tree.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tqdm import tqdm

from harness.engine.loop import generate
from harness.errors import DraftcountError
from harness.engine.arguments import add_method_run_arguments
from harness.measure.method_runs import load_method_run
from harness.trees.pruning import prune_to_most_accepted
from harness.trees.tree import depths_of
from harness.trees.tree_file import save_tree_file
from harness.verify.sampling import make_generator


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_method_run_arguments(parser, "stand")
    parser.add_argument("--nodes", type=int, default=24, help="draft nodes kept")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.nodes < 1:
        raise DraftcountError(f"--nodes must be >= 1, got {args.nodes}")
    run = load_method_run(args)
    adapter = run.adapter
    if not hasattr(adapter, "accepted_per_shape_node"):
        raise DraftcountError(f"method '{args.method}' does not draft over a static shape it counts acceptances on")
    for index, prompt in enumerate(tqdm(run.prompts, desc="calibration", disable=args.no_progress)):
        generate(run.target, adapter, run.prompt_ids(prompt), args.max_new_tokens, run.sampling,
                 generator=make_generator(args.seed + index, run.target.device), prompt_name=prompt.id,
                 prompt_key=prompt.id)
    counts = list(adapter.accepted_per_shape_node)
    parents = prune_to_most_accepted(adapter.shape, counts, args.nodes)
    save_tree_file(args.out, parents, budget=len(parents) - 1, depth=max(depths_of(parents)),
                   start_shape=list(adapter.shape), start_acceptances=counts, prompts=len(run.prompts),
                   temperature=args.temperature, method=args.method)
    print(json.dumps({"budget": len(parents) - 1, "depth": max(depths_of(parents)), "prompts": len(run.prompts)}))
    return 0
