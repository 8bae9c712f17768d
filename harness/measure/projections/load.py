"""Benchmark: decoding under load, batch size B against throughput and latency, per method, paired with `ar`.

For every B of ``--batch-sizes`` the same prompts are cut into batches of B; each batch is decoded by every method
in turn (the order rotating from batch to batch, so machine noise hits them alike), `ar` first among equals and
twice (the A/A control). Per (method, B): aggregate output tokens/s (a batch's tokens over its wall time), the
paired speedup over `ar` (per batch, then the mean), per-request end-to-end latency and time per output token
(p50/p90/p99), tau (accepted length per decoding step, the summary's convention) and tokens per target forward
(prefill included), target tokens per step (verified tokens x rows),
the padding share of the prefill (its left padding), the bound the verify forwards alone set (timed in the
same runs: the throughput if drafting, prefill and host work were free), and the wall time's split into verify
forwards, drafting and the rest (prefill, verification's sampling, host work).

    python -m harness measure load --target DIR --draft DIR --prompts FILE --batch-sizes 1,2,4,8
    python -m harness measure load            # random ~20M-parameter target with a perturbed copy as draft
    python -m harness measure load --target DIR --variant '{"name": "eagle", "method": "eagle", "drafter": DIR}'

Without ``--variant`` it decodes `sd` (``--gamma``) and `tree_sd` (``--branching``) beside `ar`; with them, the
variants named (the workflow passes bench.load_variants). A method must decode batches (its catalog entry says
``batched``: ``harness.engine.batched``).

The tree size per B: with ``--batch-latency`` (rule measure_batch_latency: the target's forward seconds per batch
size and tokens per row), a variant whose tree comes from a tree-shape file (``budget: auto``: ``shape_file``) runs
at each B > 1 with the depth and budget that file's acceptance and step costs predict for B
(``harness.measure.calibrations.tree_shape.shape_for_batch``; column ``predicted_shape``), and at B = 1 with the file's
own shape (the main comparison's, chosen from rule measure_latency's file), beside the fixed sizes the study also runs
(column ``chosen``: the fastest measured at each B).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from harness.analysis.specbench import accept_lengths
from harness.backend.device import Stopwatch
from harness.backend.models import LoadedModel, load_model, random_llama, resolve_dtype, wrap_model
from harness.data.prompts import encode_turn, load_prompts
from harness.engine.batched import generate_batch
from harness.catalog import entry
from harness.errors import DraftcountError
from harness.store.atomic import write_csv
from harness.measure.shapes import SMALL_LLAMA
from harness.measure.method_runs import VariantSpec, add_variant_arguments, build_variant, parse_variants
from harness.measure.calibrations.tree_shape import shape_for_batch
from harness.verify.sampling import SamplingConfig, make_generator

FIELDS = ["method", "batch_size", "batches", "tokens_per_s", "speedup", "e2e_p50", "e2e_p90", "e2e_p99",
          "tpot_p50", "tpot_p90", "tau", "accepted_by_position", "tokens_per_target_forward",
          "target_tokens_per_step", "tree_tokens", "wasted_verify_share", "padding_share", "verify_seconds",
          "bound_tokens_per_s", "share_of_bound", "draft_share", "other_share", "catalog_method", "options", "chosen",
          "predicted_shape"]


@dataclass
class BatchRun:
    """One batch decoded by one method: its wall time, and per request its tokens, latency and forwards."""

    seconds: float
    tokens: list[int]
    latencies: list[float]
    target_forwards: list[int]  # per request, its decoding steps
    target_tokens: int  # verified tokens of the decoding steps, all rows
    verify_seconds: float  # the batch's verify forwards (the longest-living row was part of every one)
    draft_seconds: float  # the batch's drafting, likewise
    prompt_tokens: int
    padding: int  # the prefill's left padding
    accept_lengths: list[int]  # every request's accepted length per decoding step (EAGLE/Spec-Bench's, as tau's)
    accepted_by_position: list[int]  # accepted drafts at draft position 1, 2, ... (all requests)


def percentile(values: list[float], share: float) -> float:
    """The ``share`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def decode_batch(target: LoadedModel, adapter, prompts: list[torch.Tensor], new_tokens: int,
                 sampling: SamplingConfig, seed: int) -> BatchRun:
    generators = [make_generator(seed + row, target.device) for row in range(len(prompts))]
    stopwatch = Stopwatch(target.device)
    results = generate_batch(target, adapter, prompts, new_tokens, sampling, generators)
    seconds = stopwatch.elapsed()
    lengths = [prompt.shape[-1] for prompt in prompts]
    return BatchRun(seconds, [len(result.output_ids) for result in results],
                    [result.counters.wall_seconds for result in results],
                    [result.counters.target.forwards - 1 for result in results],  # decoding steps (no prefill)
                    sum(result.counters.target.tokens for result in results) - sum(lengths),
                    max(result.counters.phase_seconds.get("target", 0.0) for result in results),
                    max(result.counters.phase_seconds.get("drafter", 0.0) for result in results),
                    sum(lengths), sum(max(lengths) - length for length in lengths),
                    [length for result in results
                     for length in accept_lengths(result.counters.step_accepted, len(result.output_ids))],
                    position_totals([result.counters.accepted_by_depth for result in results]))


def position_totals(counts: list[list[int]]) -> list[int]:
    """Element-wise sums of per-request counts by draft position (lists of different lengths)."""
    longest = max(map(len, counts), default=0)
    return [sum(row[index] for row in counts if index < len(row)) for index in range(longest)]


def summarize_runs(runs: dict[str, list[BatchRun]], batch_size: int) -> list[dict]:
    """One row per method at this batch size; speedup: the mean over batches of ar's seconds over the method's."""
    rows = []
    for method, batches in runs.items():
        tokens = sum(sum(run.tokens) for run in batches)
        latencies = [latency for run in batches for latency in run.latencies]
        tpot = [latency / count for run in batches for latency, count in zip(run.latencies, run.tokens)]
        forwards = sum(sum(run.target_forwards) + len(run.tokens) for run in batches)  # the prefill's token counts
        steps = sum(max(run.target_forwards) for run in batches)
        target_tokens = sum(run.target_tokens for run in batches)
        padding = sum(run.padding for run in batches)
        request_steps = sum(len(run.accept_lengths) for run in batches)  # every request's decoding steps
        seconds = sum(run.seconds for run in batches)
        tokens_per_s = tokens / seconds
        verify_total = sum(run.verify_seconds for run in batches)
        draft_total = sum(run.draft_seconds for run in batches)
        bound = tokens / verify_total  # the throughput if only the verify forwards took time
        rows.append({
            "method": method, "batch_size": batch_size, "batches": len(batches),
            "tokens_per_s": tokens_per_s,
            "speedup": statistics.fmean(ar.seconds / run.seconds for ar, run in zip(runs["ar"], batches)),
            "e2e_p50": percentile(latencies, 0.5), "e2e_p90": percentile(latencies, 0.9),
            "e2e_p99": percentile(latencies, 0.99), "tpot_p50": percentile(tpot, 0.5),
            "tpot_p90": percentile(tpot, 0.9), "tokens_per_target_forward": tokens / forwards,
            "tau": sum(sum(run.accept_lengths) for run in batches) / request_steps,
            "accepted_by_position": "/".join(f"{count / request_steps:.2f}" for count in
                                             position_totals([run.accepted_by_position for run in batches])),
            "target_tokens_per_step": target_tokens / max(steps, 1),
            "tree_tokens": target_tokens / request_steps,  # one row's verified tokens per step (its tree size)
            "wasted_verify_share": 1 - sum(sum(run.accept_lengths) for run in batches) / target_tokens,
            "padding_share": padding / (padding + sum(run.prompt_tokens for run in batches)),
            "verify_seconds": verify_total / max(steps, 1), "bound_tokens_per_s": bound,
            "share_of_bound": verify_total / seconds,  # tokens_per_s over the bound: the verify forwards' share
            "draft_share": draft_total / seconds, "other_share": 1 - (verify_total + draft_total) / seconds,
        })
    return rows


def mark_chosen(rows: list[dict]) -> None:
    """Per method of the catalog and batch size, the variant with the highest paired speedup (``chosen``): where a
    method runs at several tree sizes (budgets, gammas), the size this machine favours at each B."""
    best: dict[tuple[str, int], dict] = {}
    for row in rows:
        key = (row["catalog_method"], row["batch_size"])
        if row["method"] != "ar_control" and (key not in best or row["speedup"] > best[key]["speedup"]):
            best[key] = row
    for row in rows:
        row["chosen"] = best.get((row["catalog_method"], row["batch_size"])) is row


def specs_at(specs: list[VariantSpec], rows: int, batch_latency: dict[str, dict[str, float]] | None
             ) -> list[VariantSpec]:
    """The variants as they run at batch size ``rows``: with ``batch_latency``, one whose tree comes from a
    tree-shape file takes the depth and budget predicted for ``rows`` > 1 (see the module docstring), and at 1 the
    file's own."""
    if batch_latency is None:
        return specs
    if str(rows) not in batch_latency:
        raise DraftcountError(f"the batch latency has no batch size {rows} (it measures {', '.join(batch_latency)})")
    out = []
    for spec in specs:
        if spec.options.get("shape_file"):
            shape = json.loads(Path(spec.options["shape_file"]).read_text())
            if rows > 1:  # B = 1: the file's own shape, the main comparison's (measured with rule measure_latency)
                shape = shape_for_batch(shape, batch_latency[str(rows)], rows)
            options = {**{key: value for key, value in spec.options.items() if key != "shape_file"},
                       "depth": shape["depth"], "budget": shape["budget"]}
            spec = VariantSpec(spec.name, spec.method, options, spec.drafter)
        out.append(spec)
    return out


def sweep(target: LoadedModel, adapters_at: Callable[[int], dict], prompts: list[torch.Tensor],
          batch_sizes: list[int], new_tokens: int, sampling: SamplingConfig, progress: bool = True,
          warmup: bool = True) -> list[dict]:
    """Every method at every batch size on the same batches, interleaved batch by batch (each method decodes the
    first batch once untimed before, with ``warmup``); ``adapters_at(B)``: the methods' adapters at B."""
    rows = []
    for batch_size in batch_sizes:
        adapters = adapters_at(batch_size)
        batches = [prompts[start:start + batch_size] for start in range(0, len(prompts) - batch_size + 1, batch_size)]
        if not batches:
            raise DraftcountError(f"batch size {batch_size} is larger than the {len(prompts)} prompts")
        runs: dict[str, list[BatchRun]] = {method: [] for method in adapters}
        order = list(adapters)
        for method in order if warmup else ():  # lazy initialisation and allocator growth, before the clock runs
            decode_batch(target, adapters[method], batches[0], new_tokens, sampling, seed=len(prompts))
        for index, batch in enumerate(tqdm(batches, desc=f"load B={batch_size}", disable=not progress)):
            turn = order[index % len(order):] + order[: index % len(order)]
            for method in turn:
                runs[method].append(decode_batch(target, adapters[method], batch, new_tokens, sampling, seed=index))
        rows += summarize_runs(runs, batch_size)
    return rows


def encoded_prompts(target: LoadedModel, spec: str | None, count: int, prompt_len: int) -> list[torch.Tensor]:
    """``count`` prompts (1, L): the first turn of a prompt set, cut to ``prompt_len`` tokens, or random tokens."""
    if spec is None:
        generator = torch.Generator(device="cpu").manual_seed(0)  # host: the prompts, the same on every device
        # host: drawn on the host, then moved
        return [torch.randint(0, target.vocab_size, (1, prompt_len // 2 + index % (prompt_len // 2 + 1)),
                              generator=generator).to(target.device) for index in range(count)]
    if target.tokenizer is None:
        raise DraftcountError(f"--prompts {spec} needs the target's tokenizer")
    chosen = load_prompts(spec, limit=count)
    if len(chosen) < count:
        print(f"{spec} holds {len(chosen)} prompts: each is decoded more than once to make {count} requests")
    # host: prompt ids from the tokenizer, then moved
    return [torch.tensor([encode_turn(target.tokenizer, [], chosen[index % len(chosen)].turns[0])[-prompt_len:]])
            .to(target.device) for index in range(count)]


def main(argv: list[str] | None = None, prog: str = "python -m harness measure load") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", help="target model directory (default: a random ~20M-parameter Llama)")
    parser.add_argument("--draft", help="draft LM directory for sd (default: a perturbed copy of the target)")
    parser.add_argument("--prompts", help="prompt set (.jsonl, .txt; default: random token prompts)")
    parser.add_argument("--batch-sizes", default="1,2,4,8", help="comma-separated batch sizes (default 1,2,4,8)")
    parser.add_argument("--requests", type=int, default=16, help="prompts decoded at each batch size (default 16)")
    parser.add_argument("--prompt-len", type=int, default=64, help="longest prompt in tokens (default 64)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens per request (default 32)")
    parser.add_argument("--gamma", type=int, default=4, help="sd's draft length without --variant (default 4)")
    parser.add_argument("--branching", default="4,2,2,1",
                        help="tree_sd's tree without --variant: children per level (default 4,2,2,1)")
    add_variant_arguments(parser)
    parser.add_argument("--batch-latency", type=Path,
                        help="the target's latency per batch size (rule measure_batch_latency): a budget: auto "
                             "variant's tree is re-chosen per B from it")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--warmup", type=int, default=1, help="0: no untimed first batch per method and B")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--out", type=Path, help="write the table as CSV here")
    parser.add_argument("--figure", type=Path, help="write the speedup-over-ar-against-B figure here (.pdf, + .png)")
    parser.add_argument("--from-table", type=Path,
                        help="decode nothing: draw --figure again from this written table (--out's CSV)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.from_table:
        return redraw(args.from_table, args.figure)
    if args.threads:
        torch.set_num_threads(args.threads)
    batch_sizes = [int(size) for size in args.batch_sizes.split(",")]
    if any(size < 1 for size in batch_sizes):
        raise DraftcountError(f"--batch-sizes must be positive, got {args.batch_sizes}")
    if max(batch_sizes) > args.requests:
        raise DraftcountError(f"batch size {max(batch_sizes)} is larger than the {args.requests} prompts "
                              "(--requests)")
    if args.target:
        target = load_model(args.target, args.dtype, args.device, with_tokenizer=args.prompts is not None)
    else:
        target = wrap_model(random_llama(SMALL_LLAMA, seed=0, dtype=resolve_dtype(args.dtype), device=args.device))
    variants = parse_variants(args.variant) or [VariantSpec("sd", "sd", {"gamma": args.gamma}),
                                                VariantSpec("tree_sd", "tree_sd", {"branching": args.branching})]
    for spec in variants:
        if not entry(spec.method).batched:
            raise DraftcountError(f"--variant {spec.name}: method {spec.method!r} decodes one request at a time")
    if args.draft:
        draft = load_model(args.draft, args.dtype, args.device, with_tokenizer=False)
    else:
        draft = perturbed_draft(target) if any(entry(spec.method).needs_draft for spec in variants) else None
    specs = [VariantSpec("ar", "ar", {}), VariantSpec("ar_control", "ar", {}), *variants]
    batch_latency = read_batch_latency(args.batch_latency) if args.batch_latency else None
    decoded = {size: {spec.name: spec for spec in specs_at(specs, size, batch_latency)} for size in batch_sizes}
    built: dict[str, object] = {}  # one adapter per variant and options (most run alike at every B)

    def adapters_at(size: int) -> dict:
        for spec in decoded[size].values():
            built.setdefault(json.dumps([spec.name, spec.options], sort_keys=True), build_variant(spec, target, draft))
        return {name: built[json.dumps([name, spec.options], sort_keys=True)] for name, spec in decoded[size].items()}

    prompts = encoded_prompts(target, args.prompts, args.requests, args.prompt_len)
    rows = sweep(target, adapters_at, prompts, batch_sizes, args.new_tokens, SamplingConfig(args.temperature),
                 progress=not args.no_progress, warmup=args.warmup > 0)
    given = {spec.name: spec for spec in specs}
    for row in rows:  # what each row ran, for measure project-load's cost models
        spec = decoded[row["batch_size"]][row["method"]]
        row["catalog_method"] = spec.method
        row["options"] = json.dumps(spec.options, sort_keys=True)
        predicted = given[row["method"]].options.get("shape_file") and batch_latency is not None
        row["predicted_shape"] = f"depth {spec.options['depth']}, budget {spec.options['budget']}" if predicted else ""
    mark_chosen(rows)
    print(format_table(rows))
    if args.out:
        write_csv(args.out, rows, FIELDS)
        print(f"wrote {args.out}")
    if args.figure:
        from harness.analysis.load_figure import write_load_figure

        for path in write_load_figure(rows, args.figure):
            print(f"wrote {path}")
    return 0


def redraw(table: Path, figure: Path | None) -> int:
    """``--from-table``: the figure again from a written load table, nothing decoded."""
    from harness.analysis.load_figure import read_load_rows, write_load_figure

    if not table.is_file():
        raise DraftcountError(f"no load table {table}")
    if figure is None:
        raise DraftcountError("--from-table draws the figure: give --figure")
    for path in write_load_figure(read_load_rows(table), figure):
        print(f"wrote {path}")
    return 0


def read_batch_latency(path: Path) -> dict[str, dict[str, float]]:
    """Rule measure_batch_latency's file: per batch size, per tokens per row, the target's forward seconds."""
    if not path.is_file():
        raise DraftcountError(f"no batch-latency file {path} (rule measure_batch_latency writes it)")
    try:
        return {str(rows): {str(size): float(seconds) for size, seconds in sizes.items()}
                for rows, sizes in json.loads(path.read_text())["target_by_batch"].items()}
    except (ValueError, KeyError, AttributeError) as error:
        raise DraftcountError(f"{path} is not a batch-latency file: {error!r}") from None


def perturbed_draft(target: LoadedModel) -> LoadedModel:
    """The target's weights plus noise: a draft that agrees with it often, for the default random target."""
    draft = wrap_model(copy.deepcopy(target.model))
    generator = torch.Generator(device="cpu").manual_seed(1)  # host: the same draft on every device
    with torch.no_grad():
        for parameter in draft.model.parameters():
            # host: drawn on the host (the same noise on every device), then moved
            noise = torch.randn(parameter.shape, generator=generator).to(parameter.device, parameter.dtype)
            parameter.add_(noise * 0.1 * parameter.std())
    return draft


def format_table(rows: list[dict]) -> str:
    lines = ["| method | B | tokens/s | speedup over ar | E2E p50 s | E2E p90 s | TPOT p50 ms | tau | "
             "verified tokens/step | prefill padding | bound tokens/s | share of bound | verify / draft / other |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['method']} | {row['batch_size']} | {row['tokens_per_s']:.1f} | {row['speedup']:.2f} | "
                     f"{row['e2e_p50']:.3f} | {row['e2e_p90']:.3f} | {1000 * row['tpot_p50']:.1f} | "
                     f"{row['tau']:.2f} | {row['target_tokens_per_step']:.1f} | {row['padding_share']:.0%} | "
                     f"{row['bound_tokens_per_s']:.1f} | {row['share_of_bound']:.0%} | "
                     f"{row['share_of_bound']:.0%} / {row['draft_share']:.0%} / {row['other_share']:.0%} |")
    return "\n".join(lines)
