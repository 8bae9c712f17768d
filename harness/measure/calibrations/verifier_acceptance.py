"""Every verifier on the same trees: the expected number of accepted drafts per step under each one.

The method generates with the token-level verifier (that verdict drives the text); at every step, the tree it
drafted and the target's distributions over it are also verified ``--trials`` times by every verifier of
``harness.verify.VERIFIERS``, each with its own random numbers (a side generator, so the run's own draws are
untouched). The mean over those trials estimates each verifier's expected accepted drafts on that very tree;
averaged over the steps, and as 1 + that (tau's per-step equivalent, bonus token included), the verifiers are
compared on identical trees, free of the noise of comparing two runs whose texts drift apart. Traversal
Verification's paper reports +2-6% acceptance length over token-level verification.

    python -m harness measure verifiers --method eagle --drafter work/drafters/eagle --target work/models/target \\
        --prompts work/prompts/stdlib_code.jsonl --temperature 1 --trials 32 --out verifiers.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from harness.analysis.summary import bootstrap_interval
from harness.engine.loop import generate
from harness.errors import DraftcountError
from harness.engine.arguments import add_method_run_arguments
from harness.measure.method_runs import load_method_run
from harness.store.atomic import write_csv
from harness.trees.tree import TokenTree
from harness.verify import DEFAULT_VERIFIER, VERIFIERS
from harness.verify.sampling import SamplingConfig, make_generator
from harness.verify.verdict import Verdict


class SameTreeProbe:
    """A token-level verifier that also runs every verifier ``trials`` times on each tree it is given."""

    def __init__(self, trials: int, seed: int) -> None:
        self.trials = trials
        self.side = torch.Generator(device="cpu").manual_seed(seed)  # host: draws the side generators' seeds
        self.accepted: dict[str, list[float]] = {name: [] for name in VERIFIERS}

    def __call__(self, tree: TokenTree, logits: torch.Tensor, sampling: SamplingConfig,
                 generator: torch.Generator | None) -> Verdict:
        if tree.num_drafts:
            tree.resolve()
            # host: a seed, read at once
            side = make_generator(int(torch.randint(2**31, (1,), generator=self.side)), logits.device)
            for name, verify in VERIFIERS.items():
                counts = [verify(tree, logits, sampling, side).num_accepted for _ in range(self.trials)]
                self.accepted[name].append(float(np.mean(counts)))
        return VERIFIERS[DEFAULT_VERIFIER](tree, logits, sampling, generator)


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_method_run_arguments(parser, "eagle")
    parser.add_argument("--trials", type=int, default=32, help="verifications per verifier and tree")
    parser.add_argument("--out", type=Path, help="also write the per-verifier rows as CSV")
    args = parser.parse_args(argv)
    if args.temperature <= 0:
        raise DraftcountError("at --temperature 0 every verifier accepts the same drafts: use a temperature > 0")
    if args.trials < 1:
        raise DraftcountError(f"--trials must be >= 1, got {args.trials}")
    run = load_method_run(args)
    probe = SameTreeProbe(args.trials, args.seed)
    for index, prompt in enumerate(tqdm(run.prompts, desc=f"{args.method} trees", disable=args.no_progress)):
        generate(run.target, run.adapter, run.prompt_ids(prompt), args.max_new_tokens, run.sampling,
                 generator=make_generator(args.seed + index, run.target.device), verify=probe,
                 prompt_name=prompt.id, prompt_key=prompt.id)
    base = np.array(probe.accepted[DEFAULT_VERIFIER])
    rows = []
    for name, values in probe.accepted.items():
        values = np.array(values)
        ratio = (1 + values.mean()) / (1 + base.mean())
        low, high = bootstrap_interval(values - base)
        rows.append({"method": args.method, "verifier": name, "trees": len(values), "trials": args.trials,
                     "accepted_per_step": values.mean(), "tau_equivalent": 1 + values.mean(),
                     "tau_ratio_to_token_level": ratio, "difference_ci_low": low, "difference_ci_high": high})
        print(f"{args.method:>10} {name:>12}: {values.mean():.4f} accepted drafts per step over {len(values)} trees"
              f" (1 + that = {1 + values.mean():.4f}, x{ratio:.4f} token-level; difference 95% interval "
              f"[{low:+.4f}, {high:+.4f}])")
    if args.out:
        write_csv(args.out, rows, list(rows[0]))
    return 0
