"""Benchmark: each overhead switch against its absence, every method, interleaved in one process.

Settings (``--settings``, comma-separated):
  eager            transformers' DynamicCache, eager forwards (the baseline of every ratio)
  static_cache     preallocated KV caches (target and drafters), accepted paths gathered in place
  graphs_verify    static caches + the target's verify forward replayed from CUDA graphs (CUDA only)
  cuda_graphs      static caches + the verify forward and the drafters' steps replayed from CUDA graphs (CUDA only)
  compile          torch.compile'd target (dynamic shapes), DynamicCache
  graphs_compile   static caches + CUDA graphs of the compiled target and of the drafters (CUDA only)
and, for `lyanna`, the side-stream overlap as a method pair: ``lyanna_states`` (reuse=states, overlap off)
against ``lyanna_overlap`` (overlap on), both under every setting.

Prompt by prompt, every (method, setting) generates the same prompt greedily, the order rotating from prompt to
prompt so drift hits all alike; untimed warm-ups per pair first (compilation,
graph capture): one, then more on the next prompts while a warm-up still captures a CUDA graph. A timed
generation that still captures one is run again (``without_captures``: same prompt, same shapes, replayed).
Prints tokens/s per method and setting, the ratio to ``eager`` of the same method, the speedup over ``ar``
under the same setting (what the method gains once that overhead is gone), and how many outputs differ
from that method's eager output (float32: none expected; bf16 may differ where kernels round differently).
A (method, setting) that raises stops there and its row gives the error; the others still run, the table
is written, and the exit status is 1.

    python -m harness measure overheads --target work/models/target --draft work/models/draft \\
        --drafter eagle=work/drafters/eagle --drafter lyanna=work/drafters/lyanna --prompts work/prompts/stdlib_code.jsonl \\
        --device cuda --dtype bfloat16 --out overheads.csv
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm


from harness.store.atomic import write_csv
from harness.verify.sampling import SamplingConfig
from harness.engine.loop import generate
from harness.backend.models import eos_ids, load_model
from harness.data.prompts import encode_turn, load_prompts
from harness.engine.runtime import EngineOptions, EngineRuntime, warm_up, without_captures
from harness.options import parse_key_values
from harness.measure.method_runs import (
    VariantSpec, add_variant_arguments, build_variant, parse_variants, table_variants,
)

SETTINGS = {
    "eager": EngineOptions(kv_cache="dynamic", cuda_graphs="off"),
    "static_cache": EngineOptions(kv_cache="static"),
    "graphs_verify": EngineOptions(kv_cache="static", cuda_graphs="verify"),
    "cuda_graphs": EngineOptions(kv_cache="static", cuda_graphs="on"),
    "compile": EngineOptions(compile="on"),
    "graphs_compile": EngineOptions(kv_cache="static", cuda_graphs="on", compile="on"),
}
CUDA_ONLY = {"graphs_verify", "cuda_graphs", "graphs_compile"}
DEFAULT_SETTINGS = {"cpu": ["eager", "static_cache"], "cuda": ["eager", "static_cache", "graphs_verify", "cuda_graphs"]}
METHODS = {"ar": ("ar", {}), "sd": ("sd", {}), "tree_sd": ("tree_sd", {}), "eagle": ("eagle", {}),
           "lyanna": ("lyanna", {}), "lyanna_states": ("lyanna", {"reuse": "states"}),
           "lyanna_overlap": ("lyanna", {"reuse": "states", "overlap": "on"})}


def default_variants(names: str | None, draft: str | None, drafters: dict[str, str],
                     parser: argparse.ArgumentParser) -> list[VariantSpec]:
    """The built-in table's variants whose models are given (``names``: those of them)."""
    available = {spec.name: spec for spec in table_variants(METHODS, draft is not None, drafters)[0]}
    chosen = names.split(",") if names else list(available)
    for name in chosen:
        if name not in available:
            parser.error(f"method {name!r} is unknown or its models were not given (available: {sorted(available)})")
    return [available[name] for name in chosen]


@dataclass
class Tally:
    tokens: int = 0
    seconds: float = 0.0
    differing: int = 0
    captured: int = 0  # CUDA graphs captured inside the timed generations (after their reruns)
    reruns: int = 0  # timed generations run again because they captured a graph
    outputs: list[list[int]] = field(default_factory=list)
    error: str = ""  # why this (method, setting) stopped: its row is left blank, the other pairs still run

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def _ratio(numerator: Tally, denominator: Tally | None) -> float | str:
    if denominator is None or numerator.error or denominator.error or not denominator.tokens_per_second:
        return ""
    return round(numerator.tokens_per_second / denominator.tokens_per_second, 3)


def table_rows(pairs: list[tuple[str, str]], tallies: dict[tuple[str, str], Tally], prompts: int) -> list[dict]:
    """One row per (method, setting): tokens/s, the ratio to the method's eager, the speedup over ar under the
    setting, outputs differing from eager, graph captures and reruns inside the timings, and the error of a
    pair that failed (whose figures, and the ratios that need them, are blank)."""
    rows = []
    for method, setting in pairs:
        tally, base = tallies[(method, setting)], tallies[(method, "eager")]
        differing = sum(a != b for a, b in zip(tally.outputs, base.outputs))
        rows.append({"method": method, "setting": setting,
                     "tokens_per_s": "" if tally.error else round(tally.tokens_per_second, 2),
                     "ratio_to_eager": _ratio(tally, base),
                     "speedup_over_ar": _ratio(tally, tallies.get(("ar", setting))),
                     "outputs_differing_from_eager": "" if tally.error or base.error else f"{differing}/{prompts}",
                     "graphs_captured_timed": tally.captured, "timing_reruns": tally.reruns, "error": tally.error})
    return rows


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="target model directory (with its tokenizer)")
    parser.add_argument("--draft", help="draft LM directory (sd, tree_sd)")
    parser.add_argument("--drafter", action="append", metavar="METHOD=DIR",
                        help="a trained drafter directory of a method, repeatable (eagle=DIR, lyanna=DIR)")
    parser.add_argument("--prompts", required=True, help="prompt file or 'humaneval'")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--settings", help="comma-separated (default: eager,static_cache and, on CUDA, "
                                           "graphs_verify,cuda_graphs)")
    parser.add_argument("--methods", help="comma-separated names of the built-in table (default: every one whose "
                                          "models are given); --variant measures the plan's variants instead")
    add_variant_arguments(parser)
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    drafters = parse_key_values(args.drafter)
    cuda = args.device.startswith("cuda")
    settings = args.settings.split(",") if args.settings else list(DEFAULT_SETTINGS["cuda" if cuda else "cpu"])
    for name in settings:
        if name not in SETTINGS:
            parser.error(f"unknown setting {name!r}; choose from {', '.join(SETTINGS)}")
        if name in CUDA_ONLY and not cuda:
            parser.error(f"setting {name} needs --device cuda")
    if "eager" not in settings:
        settings.insert(0, "eager")
    specs = parse_variants(args.variant) or default_variants(args.methods, args.draft, drafters, parser)
    methods = [spec.name for spec in specs]

    target = load_model(args.target, args.dtype, args.device)
    draft = load_model(args.draft, args.dtype, args.device) if args.draft else None
    adapters = {spec.name: build_variant(spec, target, draft) for spec in specs}
    runtimes = {name: EngineRuntime(target, SETTINGS[name]) for name in settings}
    prompts = [encode_turn(target.tokenizer, [], p.turns[0]) for p in load_prompts(args.prompts, limit=args.limit)]
    for runtime in runtimes.values():  # caches sized for the longest prompt before the warm-up: no regrowth later
        runtime.reserve(max(len(ids) for ids in prompts) + args.max_new_tokens + 1)
    eos, greedy = eos_ids(target), SamplingConfig()
    pairs = [(method, setting) for method in methods for setting in settings]

    def run(method: str, setting: str, ids: list[int], max_new: int):
        # host: prompt ids, moved by generate
        return generate(target, adapters[method], torch.tensor([ids]), max_new, greedy, eos,
                        runtime=runtimes[setting])

    tallies = {pair: Tally() for pair in pairs}

    def failed(pair: tuple[str, str], error: Exception) -> None:  # the pair stops; the others go on
        tallies[pair].error = f"{type(error).__name__}: {error}"
        print(f"{pair[0]} under {pair[1]} failed: {tallies[pair].error}", file=sys.stderr, flush=True)

    for method, setting in tqdm(pairs, desc="warm-up", unit="pair", disable=args.no_progress):
        try:
            warm_up(lambda index: run(method, setting, prompts[index % len(prompts)], args.max_new_tokens),
                    lambda: runtimes[setting].captures, 1)
        except Exception as error:  # noqa: BLE001 - one broken (method, setting) must not lose the whole table
            failed((method, setting), error)
    with tqdm(total=len(prompts) * len(pairs), desc="interleaved", unit="gen",
              disable=args.no_progress) as bar:
        for index, ids in enumerate(prompts):
            shift = index % len(pairs)
            for method, setting in pairs[shift:] + pairs[:shift]:
                tally = tallies[(method, setting)]
                bar.update(1)
                if tally.error:
                    continue
                try:
                    result, captured, reruns = without_captures(
                        lambda: run(method, setting, ids, args.max_new_tokens), lambda: runtimes[setting].captures)
                except Exception as error:  # noqa: BLE001
                    failed((method, setting), error)
                    continue
                tally.captured += captured
                tally.reruns += reruns
                tally.tokens += result.counters.new_tokens
                tally.seconds += result.counters.wall_seconds
                tally.outputs.append(result.output_ids)
    rows = table_rows(pairs, tallies, len(prompts))
    print(f"overhead switches on {target.device} ({args.dtype}), {len(prompts)} prompts x {args.max_new_tokens} "
          "tokens, greedy, interleaved")
    header = list(rows[0])
    print("  ".join(f"{name:>28}" for name in header))
    for row in rows:
        print("  ".join(f"{row[name]!s:>28}" for name in header))
    if "lyanna_states" in methods and "lyanna_overlap" in methods:
        for setting in settings:
            ratio = _ratio(tallies[("lyanna_overlap", setting)], tallies[("lyanna_states", setting)])
            if ratio != "":
                print(f"lyanna overlap on/off under {setting}: {ratio:.3f}x tokens/s")
    if args.out:
        write_csv(args.out, rows, header)
    broken = [f"{row['method']} under {row['setting']}" for row in rows if row["error"]]
    if broken:
        raise SystemExit(f"measure overheads: {len(broken)} of {len(rows)} (method, setting) pairs failed "
                         f"({', '.join(broken)}); their rows are blank and say why")


if __name__ == "__main__":
    main()
