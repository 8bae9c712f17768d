"""Engine efficiency at a real shape: each method's measured speedup over `ar` against the speedup its measured
forwards predict, at a chosen acceptance.

    python -m harness measure engine-efficiency --shape llama-3.1-8b --device cuda --dtype bfloat16 \
        --deadline 240 --out results-gpu-quick/checks/engine_efficiency.csv       # on a GPU (a few minutes)
    python -m harness measure engine-efficiency --scale 8 --threads 1 --trials 3 --prompt-tokens 128 \
        --new-tokens 64 --repeats 10 --out results/engine/engine_efficiency-cpu.csv   # 1/8 of the shapes, a CPU

Random weights of the target's real shape (``--shape``; ``--scale`` divides every width, head count, layer count
and the vocabulary) made decisive (``harness.measure.diagnostics.oracle_drafts.decisive_target``: the same cost, a
greedy choice no rounding flips), and of each drafter's: EAGLE's head and Lyanna's drafter (one layer at the target's
width), DFlash's (z-lab's released 5 layers, block 16), sd's draft LM (Llama-3.2-1B's shape), each built by its method's
cost model (``METHOD.cost.random_adapter``). Every method drafts with its own code every step; its proposals are
replaced by the target's greedy continuation so that a step emits tau tokens (``OracleDrafts``). Per variant and
tau:

    measured speedup  = its decoding tokens/s over `ar`'s on the same prompt (geometric mean over trials)
    predicted speedup = tau x target(1) / (drafting + target(tokens verified per step))   (``projected_speedup``)
    efficiency        = measured / predicted

with the forwards' seconds measured apart, in the same process at the same shapes, timed as the engine runs them
(CUDA graphs on a GPU): the target's (``target_latencies``) and the drafter's by its method's cost model. An
efficiency of 1 is an engine that costs its forwards and nothing else; what it lacks is what the engine adds
(host work, launches, syncs, bookkeeping). The contenders run one after another, in a rotating order per trial,
after an untimed warm-up trial (CUDA graphs captured there); every output must equal the target's continuation
(``identical``). ``--deadline`` stops before a trial that would not finish in time; the table is rewritten after
every trial, so a stage stopped at its deadline keeps what it measured.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from harness.analysis.timing import geometric_mean
from harness.backend.models import LoadedModel, resolve_dtype, wrap_model
from harness.catalog import entry
from harness.engine.adapter import DraftAdapter
from harness.engine.loop import generate
from harness.engine.method_spec import (
    BuildInputs,
    Latencies,
    build_adapter,
    method_spec,
    parse_method_options,
)
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.errors import DraftcountError
from harness.measure.calibrations.latency import target_latencies
from harness.measure.diagnostics.oracle_drafts import OracleDrafts, decisive_target
from harness.measure.projections.projection import drafting_seconds, projected_speedup
from harness.measure.shapes import SHAPES, scaled_shape, shaped_llama
from harness.options import parse_key_values, parse_options
from harness.store.atomic import write_csv
from harness.verify.sampling import SamplingConfig

VARIANTS: dict[str, tuple[str, dict]] = {  # name -> (method, options): llama3-8b.yaml's shapes, chains deep enough
    "eagle_chain": ("eagle", {"top_k": 1, "depth": 6, "budget": 6}),     # for tau 6
    "eagle_tree": ("eagle", {"top_k": 10, "depth": 6, "budget": 59}),
    "lyanna": ("lyanna", {"top_k": 10, "depth": 6, "budget": 59, "reuse": "logits"}),
    "dflash": ("dflash", {}),  # the released drafter's block of 16, verified as a chain
    "sd": ("sd", {"gamma": 5}),
}
COLUMNS = ["variant", "method", "tau", "trials", "tau_measured", "verified_per_step", "ar_ms_per_token", "target_ms",
           "draft_ms", "verify_ms", "measured_speedup", "predicted_speedup", "efficiency", "identical", "shape",
           "device", "dtype", "timing"]


@dataclass(frozen=True)
class Run:
    """One timed generation: its contender (``variant``, ``tau``; `ar`'s tau is 1), trial and counts."""

    variant: str
    tau: float
    trial: int
    seconds: float  # decoding (the prefill excluded)
    tokens: int  # decoded (the first, the prefill's, excluded)
    steps: int
    accepted: int
    drafted: int
    identical: bool

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def random_models(shape: str, scale: int, draft_shape: str, dtype: torch.dtype, device: str
                  ) -> tuple[LoadedModel, LoadedModel, list[int]]:
    """The decisive random target of ``shape`` and a random draft LM of ``draft_shape`` (both / ``scale``), built on
    ``device``, and the target's greedy successor of every token (``decisive_target``)."""
    torch.manual_seed(0)
    target = shaped_llama(scaled_shape(SHAPES[shape], scale), dtype, device)
    successor = decisive_target(target).tolist()
    draft = shaped_llama(scaled_shape(SHAPES[draft_shape], scale), dtype, device)
    return (wrap_model(target, source=f"random {shape} shape / {scale}, decisive"),
            wrap_model(draft, source=f"random {draft_shape} shape / {scale}"), successor)


def variant_adapter(method: str, options: dict, target: LoadedModel, draft: LoadedModel) -> DraftAdapter:
    """The method's adapter: over a random drafter from its cost model (``random_adapter``) when it needs a trained
    one, else built as a run builds it (sd: the random draft LM)."""
    if not entry(method).needs_drafter:
        return build_adapter(method, options, BuildInputs(target, draft, None))[0]
    cost = method_spec(method).cost
    if cost is None or cost.random_adapter is None:
        raise DraftcountError(f"method {method!r} has no random drafter (METHOD.cost.random_adapter) to measure")
    return cost.random_adapter(parse_method_options(method, options), target)


def prediction_timing(options: EngineOptions, device: torch.device) -> str:
    """How the predicting forwards are timed (``harness.backend.timed``): as the engine runs them."""
    if options.cuda_graphs != "off" and device.type == "cuda":
        return "cuda_graphs"
    return "static" if options.kv_cache == "static" else "eager"


def variant_latencies(target: LoadedModel, draft: LoadedModel, variants: dict[str, tuple[str, dict]],
                      tree_tokens: dict[str, int], prefix: int, repeats: int, timing: str) -> dict[str, Latencies]:
    """Per variant, the latencies its prediction reads: the target's forward over 1 token and over each variant's
    tree, the draft LM's over 1, and the variant's drafter step at its top_k (its cost model's ``step_latency``)."""
    sizes = sorted({1, *tree_tokens.values()})
    target_seconds = target_latencies(target.model, prefix, sizes, repeats, timing)
    uses_draft = any(entry(method).needs_draft for method, _ in variants.values())
    draft_seconds = target_latencies(draft.model, prefix, [1], repeats, timing) if uses_draft else {1: math.nan}
    steps: dict[tuple[str, int], float] = {}
    latencies = {}
    for name, (method, options) in variants.items():
        cost, top_k = method_spec(method).cost, int(options.get("top_k", 1))
        measured = {}
        if cost is not None and cost.step_latency is not None:
            key = (cost.component, top_k)
            if key not in steps:
                steps[key] = cost.step_latency(target.model, top_k, prefix, repeats, timing)
            measured[cost.component] = steps[key]
        latencies[name] = Latencies(target_seconds, draft_seconds, top_k, measured)
    return latencies


def successor_chain(successor: list[int], start: int, length: int) -> list[int]:
    """``length`` tokens, each the successor of the one before, from ``start``'s successor on."""
    chain, token = [], start
    for _ in range(length):
        token = successor[token]
        chain.append(token)
    return chain


def timed_run(target: LoadedModel, adapter: DraftAdapter, runtime: EngineRuntime, prompt: torch.Tensor,
              new_tokens: int, expected: list[int], variant: str, tau: float, trial: int) -> Run:
    """One greedy generation of ``new_tokens`` and what it counted."""
    result = generate(target, adapter, prompt, new_tokens, SamplingConfig(), runtime=runtime)
    counters = result.counters
    return Run(variant, tau, trial, counters.wall_seconds - counters.prefill_seconds, counters.new_tokens - 1,
               len(counters.step_accepted), sum(counters.step_accepted), counters.drafted_tokens,
               result.output_ids == expected)


def efficiency_rows(runs: list[Run], variants: dict[str, tuple[str, dict]], latencies: dict[str, Latencies],
                    labels: dict[str, str]) -> list[dict]:
    """One row per variant and tau (see the module docstring), from every timed trial's runs."""
    ar = {run.trial: run for run in runs if run.variant == "ar"}
    rows = []
    contenders = dict.fromkeys((run.variant, run.tau) for run in runs if run.variant != "ar")
    for variant, tau in contenders:
        mine = [run for run in runs if (run.variant, run.tau) == (variant, tau) and run.trial in ar]
        if not mine:
            continue
        method, options = variants[variant]
        steps = sum(run.steps for run in mine)
        tau_measured = (sum(run.accepted for run in mine) + steps) / steps
        verified = (sum(run.drafted for run in mine) + steps) / steps
        drafting = drafting_seconds(method, options, latencies[variant])
        measured = geometric_mean(np.array([run.rate / ar[run.trial].rate for run in mine]))
        predicted = projected_speedup(tau_measured, verified, drafting, latencies[variant])
        same = sum(run.identical for run in mine) + sum(ar[run.trial].identical for run in mine)
        rows.append({
            "variant": variant, "method": method, "tau": tau, "trials": len(mine), "tau_measured": round(tau_measured, 3),
            "verified_per_step": round(verified, 2),
            "ar_ms_per_token": round(1e3 * float(np.median([ar[run.trial].seconds / ar[run.trial].tokens
                                                             for run in mine])), 3),
            "target_ms": round(1e3 * latencies[variant].target_at(1), 3), "draft_ms": round(1e3 * drafting, 3),
            "verify_ms": round(1e3 * latencies[variant].target_at(verified), 3),
            "measured_speedup": round(measured, 3), "predicted_speedup": round(predicted, 3),
            "efficiency": round(measured / predicted, 3), "identical": f"{same}/{2 * len(mine)}", **labels})
    return rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.1-8b", help="the target's shape")
    parser.add_argument("--draft-shape", choices=sorted(SHAPES), default="llama-3.2-1b", help="sd's draft LM's")
    parser.add_argument("--scale", type=int, default=1, help="divide every width, head and layer count by this")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--taus", default="2,3,4,5,6", help="tokens a step emits (comma-separated, each >= 1)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], help="default: bfloat16 on CUDA, float32 elsewhere "
                                                                          "(float16's range is too short for a "
                                                                          "decisive target's logits)")
    parser.add_argument("--engine", action="append", metavar="KEY=VALUE", help="engine switches (default: auto)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--trials", type=int, default=3, help="timed trials (one prompt each), after a warm-up")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20, help="timed repeats of each predicting forward")
    parser.add_argument("--deadline", type=float, default=0, help="seconds from the start: no trial begins that "
                                                                   "would end later (0: none)")
    parser.add_argument("--out", type=Path, help="write the table as CSV (after every trial)")
    args = parser.parse_args(argv)
    names = [name for name in args.variants.split(",") if name]
    unknown = sorted(set(names) - set(VARIANTS))
    try:
        taus = [float(tau) for tau in args.taus.split(",") if tau]
    except ValueError:
        parser.error(f"--taus takes comma-separated numbers, got {args.taus!r}")
    if unknown or not names:
        parser.error(f"--variants takes a comma-separated subset of {', '.join(VARIANTS)}, got {args.variants!r}")
    if not taus or min(taus) < 1 or args.trials < 1 or args.new_tokens < 2 or args.prompt_tokens < 1:
        parser.error("need taus >= 1, --trials >= 1, --new-tokens >= 2 and --prompt-tokens >= 1")
    started = time.monotonic()
    if args.threads:
        torch.set_num_threads(args.threads)
    engine = parse_options(EngineOptions, parse_key_values(args.engine), "the engine (--engine)")
    dtype = resolve_dtype(args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32"))
    target, draft, successor = random_models(args.shape, args.scale, args.draft_shape, dtype, args.device)
    variants = {name: VARIANTS[name] for name in names}
    adapters = {"ar": build_adapter("ar", {}, BuildInputs(target, None, None))[0]}
    adapters |= {name: variant_adapter(method, options, target, draft) for name, (method, options) in variants.items()}
    runtimes = {name: EngineRuntime(target, engine) for name in adapters}
    timing = prediction_timing(runtimes["ar"].options, target.device)
    prefix = args.prompt_tokens + args.new_tokens // 2
    latencies = variant_latencies(target, draft, variants, {name: adapters[name].max_draft_nodes + 1 for name in
                                                            variants}, prefix, args.repeats, timing)
    labels = {"shape": f"{args.shape} / {args.scale}", "device": str(target.device), "dtype": str(dtype).split(".")[-1],
              "timing": timing}
    print(f"target {target.num_parameters / 1e9:.3f}B parameters ({target.source}), {labels['dtype']} on "
          f"{target.device}, engine {runtimes['ar'].options}, predictions timed {timing}", flush=True)
    lookahead = max(adapter.max_draft_nodes for adapter in adapters.values()) + 1
    generator = torch.Generator(device="cpu").manual_seed(1)  # host: the prompts, the same on every device
    contenders = [("ar", 1.0)] + [(name, tau) for name in variants for tau in taus]
    runs: list[Run] = []
    rows: list[dict] = []
    last = 0.0
    for trial in range(args.trials + 1):  # trial 0: the warm-up, untimed (captures on a GPU)
        if args.deadline and trial and time.monotonic() - started + last > args.deadline:
            print(f"stopped at the deadline ({args.deadline:.0f} s) after {trial - 1} timed trial(s)", flush=True)
            break
        begun = time.monotonic()
        # host: drawn on the host, then moved
        prompt = torch.randint(0, target.vocab_size, (1, args.prompt_tokens), generator=generator)
        chain = successor_chain(successor, int(prompt[0, -1]), args.new_tokens + lookahead)
        # host: the prompt and its successor chain, moved once
        continuation = torch.cat([prompt[0], torch.tensor(chain)]).to(target.device)
        prompt = prompt.to(target.device)
        shift = trial % len(contenders)
        order = contenders[shift:] + contenders[:shift]
        done = []
        for name, tau in tqdm(order, desc=f"trial {trial}" if trial else "warm-up", leave=False):
            adapter = adapters["ar"] if name == "ar" else OracleDrafts(adapters[name], continuation, tau)
            done.append(timed_run(target, adapter, runtimes[name], prompt, args.new_tokens,
                                  chain[:args.new_tokens], name, tau, trial))
        if not done[order.index(("ar", 1.0))].identical:
            raise DraftcountError("the target's greedy output is not its successor chain: it is not decisive")
        last = time.monotonic() - begun
        if trial:
            runs += done
            rows = efficiency_rows(runs, variants, latencies, labels)
            if args.out:
                write_csv(args.out, rows, COLUMNS)
    if not rows:
        raise DraftcountError(f"no timed trial finished within the deadline of {args.deadline:.0f} s")
    print_table(rows)
    if args.out:
        print(f"wrote {args.out}")
    return 0


def print_table(rows: list[dict]) -> None:
    shown = ["variant", "tau", "tau_measured", "verified_per_step", "draft_ms", "verify_ms", "measured_speedup",
             "predicted_speedup", "efficiency", "identical"]
    print("  ".join(f"{name:>17}" for name in shown))
    for row in rows:
        print("  ".join(f"{row[name]!s:>17}" for name in shown))


if __name__ == "__main__":
    main()
