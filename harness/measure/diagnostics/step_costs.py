"""Where a speculative step's time goes: drafting (propose: a model-free method's lookups and tree building),
bookkeeping (commit: a store's updates) and the rest (target forward + verification), per method, interleaved
prompt by prompt in one process. Explains a speedup: a method beats `ar` only when tau * (ar's ms per token)
exceeds its ms per step. For drafter methods it also prints the drafter's forwards per step, the milliseconds of
one (its phase time, ``harness.backend.phases``: the forward and its logits) and what drafting costs per step
(propose + commit) over the forwards' time: the drafting code's overhead on top of its bare forwards.

    python -m harness measure step-costs --target work/models/target --draft work/models/draft \
        --drafter eagle=work/drafters/eagle --drafter lyanna=work/drafters/lyanna --prompts work/prompts/stdlib_code.jsonl \
        --method pld --method stand
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import torch

from harness.verify.sampling import SamplingConfig
from harness.engine.loop import generate
from harness.backend.models import load_model
from harness.data.prompts import encode_turn, load_prompts
from harness.engine.method_spec import BuildInputs, build_adapter


def timed(adapter, totals: dict[str, float]):
    """Wrap propose/commit of ``adapter`` to add their wall time to ``totals``."""
    for name in ("propose", "commit"):
        original = getattr(adapter, name)

        def wrapper(*args, original=original, name=name):
            started = time.perf_counter()
            result = original(*args)
            totals[name] += time.perf_counter() - started
            return result

        setattr(adapter, name, wrapper)
    return adapter


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft")
    parser.add_argument("--drafter", action="append", default=[], metavar="METHOD=DIR")
    parser.add_argument("--method", action="append", default=[],
                        help="a further method that needs no model (pld, stand, reader, hedgespec), default options")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_model(args.target)
    draft = load_model(args.draft) if args.draft else None
    methods = {"ar": ("ar", {}, None)}
    if draft is not None:
        methods["sd"] = ("sd", {"gamma": 4}, None)
    for item in args.drafter:
        method, _, directory = item.partition("=")
        methods[method] = (method, {}, Path(directory))
    for method in args.method:
        methods[method] = (method, {}, None)
    adapters = {name: build_adapter(method, options, BuildInputs(target, draft, directory))[0]
                for name, (method, options, directory) in methods.items()}
    totals = {name: defaultdict(float) for name in adapters}
    for name, adapter in adapters.items():
        timed(adapter, totals[name])
    prompts = load_prompts(args.prompts, None, args.limit)
    sampling = SamplingConfig(args.temperature)
    for index, prompt in enumerate(prompts):
        ids = torch.tensor([encode_turn(target.tokenizer, [], prompt.turns[0])])  # host: prompt ids, moved by generate
        order = list(adapters) if index % 2 == 0 else list(adapters)[::-1]
        for name in order:
            result = generate(target, adapters[name], ids, args.max_new_tokens, sampling,
                              generator=torch.Generator(device=target.device).manual_seed(index))
            counters = result.counters
            totals[name]["wall"] += counters.wall_seconds - counters.prefill_seconds
            totals[name]["steps"] += len(counters.step_accepted)
            totals[name]["tokens"] += counters.new_tokens - 1
            totals[name]["drafter_seconds"] += counters.phase_seconds["drafter"]
            totals[name]["drafter_forwards"] += counters.drafter.forwards
    ar_ms_per_token = 1000 * totals["ar"]["wall"] / totals["ar"]["tokens"]
    print(f"{'method':10s} {'tau':>5s} {'ms/step':>8s} {'draft':>7s} {'commit':>7s} {'target+verify':>13s} "
          f"{'ms/token':>9s} {'speedup':>8s} {'drafter fwd/step':>16s} {'ms/fwd':>7s} {'drafting/fwd time':>17s}")
    for name, total in totals.items():
        steps = total["steps"]
        tau = total["tokens"] / steps
        per_step = 1000 * total["wall"] / steps
        draft_ms, commit_ms = 1000 * total["propose"] / steps, 1000 * total["commit"] / steps
        per_token = 1000 * total["wall"] / total["tokens"]
        forwards, drafter_s = total["drafter_forwards"], total["drafter_seconds"]
        drafter_columns = (f"{forwards / steps:16.2f} {1000 * drafter_s / forwards:7.2f} "
                           f"{(total['propose'] + total['commit']) / drafter_s:17.2f}" if forwards and drafter_s
                           else f"{'-':>16s} {'-':>7s} {'-':>17s}")
        print(f"{name:10s} {tau:5.2f} {per_step:8.2f} {draft_ms:7.2f} {commit_ms:7.2f} "
              f"{per_step - draft_ms - commit_ms:13.2f} {per_token:9.2f} {ar_ms_per_token / per_token:8.2f} "
              f"{drafter_columns}")


if __name__ == "__main__":
    main()
