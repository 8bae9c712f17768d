"""Command line: ``python -m harness run|train|methods|summarize|figures|report|export-specbench|specbench-speed|
divergence|measure|metrics|build-datastore|fetch|fetch-wheel|import-gguf|synth-questions|chat-prompts|regenerate|
data-table|evaluate-target|
gpu-wheels|gpu-install|quick-readme|learning-curves|claims ...``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.engine.arguments import add_method_run_arguments, check_at_least, checked_run_arguments
from harness.errors import DraftcountError
from harness.analysis import commands as analysis_commands
from harness.gpu import commands as gpu_commands
from harness.store import commands as store_commands
from harness.training import command as train_command
from harness.training import data_commands
from harness.training import vlm_command
from harness.options import parse_key_values, parse_options


def _run_parser(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser("run", help="run one method over a prompt set and write JSONL records")
    add_method_run_arguments(run)
    run.add_argument("--variant", help="name recorded for this configuration of the method (default: the method)")
    run.add_argument("--dataset", help="dataset name recorded in the results (default: the prompt file's stem)")
    run.add_argument("--category", help="keep only prompts of this category (comma-separated for several)")
    run.add_argument("--stratify", action="store_true",
                     help="spread --limit evenly over the prompt set's categories (Spec-Bench: all 13 of them)")
    run.add_argument("--chat-template", default="auto", choices=["auto", "model", "plain", "vicuna", "llama-2"],
                     help="how turns become prompt text: auto = the model's chat template if it has one, else plain; "
                          "vicuna/llama-2 = FastChat's templates")
    run.add_argument("--system-prompt", default="", help="a system prompt (default: the template's own, or none)")
    run.add_argument("--repeats", type=int, default=1,
                     help="run the whole prompt set this many times (same seeds): mean +- std of the speedup over runs")
    run.add_argument("--engine", action="append", metavar="KEY=VALUE",
                     help="engine switch, repeatable: kv_cache=dynamic|static, cuda_graphs=off|verify|on, compile=off|on, "
                          "compile_mode=...")
    run.add_argument("--verifier", default="token_level",
                     help="how drafts are verified: token_level (default) or traversal (leaf-to-root, sequence-level)")
    run.add_argument("--samples", type=int, default=1,
                     help="generations per prompt and turn, each with its own seed (test-time scaling); a method "
                          "that learns across them (stand) keeps its state over one prompt's samples")
    run.add_argument("--pair-with-ar", action="store_true", help="interleave the ar baseline prompt by prompt")
    run.add_argument("--interleave", default="auto", choices=["auto", "step", "turn"],
                     help="with --pair-with-ar: step (the two generations of a turn take turns step by step, each "
                          "timing its own steps; the default off CUDA) or turn (one after the other; CUDA's default)")
    run.add_argument("--warmup", type=int, default=1,
                     help="untimed warm-up generations per method (under CUDA graphs, up to 4 more while one "
                          "still captures a graph)")
    run.add_argument("--out", required=True, type=Path, help="output JSONL path")


def _cmd_run(args: argparse.Namespace) -> int:
    from harness.engine.runtime import EngineOptions
    from harness.runner import RunConfig, run
    from harness.data.templates import PromptFormat
    from harness.catalog import options_type
    sampling = checked_run_arguments(args)  # every number in range before anything loads
    for value, floor, option in ((args.samples, 1, "--samples"), (args.repeats, 1, "--repeats"),
                                 (args.warmup, 0, "--warmup")):
        check_at_least(value, floor, option)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    # parsed once, before any model is loaded: a bad option fails here, and the run builds from this object
    options = parse_options(options_type(args.method), parse_key_values(args.opt), f"method '{args.method}'")
    engine = parse_options(EngineOptions, parse_key_values(args.engine), "the engine (--engine)")
    from harness.verify import get_verifier

    get_verifier(args.verifier)  # a one-line error for an unknown verifier, before loading any model
    if engine.cuda_graphs not in ("off", "auto") and not args.device.startswith("cuda"):
        raise DraftcountError(f"--engine cuda_graphs={engine.cuda_graphs} needs a CUDA device, not --device {args.device}")
    config = RunConfig(
        method=args.method, target=args.target, prompts=args.prompts, out=args.out, variant=args.variant,
        draft=args.draft,
        drafter=args.drafter, method_options=options, dataset=args.dataset, category=args.category,
        limit=args.limit, stratify=args.stratify, prompt_format=PromptFormat(args.chat_template, args.system_prompt),
        max_new_tokens=args.max_new_tokens,
        sampling=sampling, seed=args.seed, dtype=args.dtype,
        device=args.device, pair_with_ar=args.pair_with_ar, warmup=args.warmup, engine=engine,
        verifier=args.verifier, samples=args.samples, interleave=args.interleave, repeats=args.repeats,
    )
    count = run(config, progress=not args.no_progress)
    print(f"wrote {count} records to {args.out}")
    return 0


def _cmd_summarize(args: argparse.Namespace) -> int:
    from harness.analysis.views import write_tables

    missing = [str(path) for path in args.records if not path.is_file()]
    if missing:
        raise DraftcountError(f"no records file {missing[0]}")
    if args.out is None and args.tables_dir is None:
        raise DraftcountError("say where to write: --tables-dir (every table) or --out (the summary only)")
    table = write_tables(args.records, args.tables_dir, args.out)
    shown = ["variant", "dataset", "temperature", "tokens_per_s", "tau", "speedup_paired_mean", "efficiency"]
    print(table[[column for column in shown if column in table]].to_string(
        index=False, float_format=lambda value: f"{value:.3f}"))
    return 0


def _cmd_figures(args: argparse.Namespace) -> int:
    from harness.analysis.figures import write_figures

    main = [name for name in (args.main or "").split(",") if name]
    names = [name for name in (args.only or "").split(",") if name]
    for path in write_figures(args.tables, args.out_dir, main, names):
        print(f"wrote {path}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from harness.analysis.families import parse_comparisons
    from harness.analysis.report import write_report

    for path in [*args.records, *(args.metrics or [])]:
        if not path.is_file():
            raise DraftcountError(f"no file {path}")
    main = [name for name in (args.main or "").split(",") if name]
    try:
        published = json.loads(args.published or "{}")
    except json.JSONDecodeError as error:
        raise DraftcountError(f"--published is not JSON: {error}") from None
    write_report(args.tables, args.records, args.figures, args.out, main, args.metrics, parse_comparisons(args.compare),
                 published)
    print(f"wrote {args.out}")
    return 0


def _cmd_export_specbench(args: argparse.Namespace) -> int:
    from harness.analysis.specbench import export_records

    for path in args.records:
        if not path.is_file():
            raise DraftcountError(f"no records file {path}")
        for written in export_records(path, args.out_dir):
            print(f"wrote {written}")
    return 0


def _cmd_specbench_speed(args: argparse.Namespace) -> int:
    from harness.analysis.specbench import speed_report

    base = args.base_path or args.file_path.with_name(args.file_path.name.replace(".jsonl", ".ar.jsonl"))
    report = speed_report(args.file_path, base, args.tokenizer_path, args.task)
    print(f"Task: {args.task} ({report['answers']} answers; baseline tokens "
          f"{'counted again with ' + args.tokenizer_path if args.tokenizer_path else 'as recorded'})")
    print(f"#Mean accepted tokens: {report['mean_accepted_tokens']}")
    print(f"Tokens per second: {report['tokens_per_second']}")
    print(f"Tokens per second for the baseline: {report['tokens_per_second_baseline']}")
    print(f"Speedup ratio: {report['speedup']}")
    return 0


def _cmd_divergence(args: argparse.Namespace) -> int:
    from harness.analysis.divergence import divergence_table

    for path in args.records:
        if not path.is_file():
            raise DraftcountError(f"no records file {path}")
    table = divergence_table(args.records)
    print(table.to_string(index=False))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
    if args.expect_identical and int(table["diverged"].sum()):
        raise DraftcountError(f"{int(table['diverged'].sum())} greedy outputs differ from their paired ar output")
    return 0


def _reporting_parsers(subparsers: argparse._SubParsersAction) -> None:
    summary = subparsers.add_parser("summarize", help="per method/dataset/temperature table from JSONL records")
    summary.add_argument("records", nargs="+", type=Path, help="records files written by `run`")
    summary.add_argument("--tables-dir", type=Path,
                         help="write every table here: summary.csv and each view's (harness/analysis/views.py)")
    summary.add_argument("--out", type=Path, help="the summary CSV (default: TABLES_DIR/summary.csv)")
    figures = subparsers.add_parser("figures", help="paper-style figures (PDF + PNG) from the tables")
    figures.add_argument("--tables", required=True, type=Path, help="folder `summarize --tables-dir` wrote")
    figures.add_argument("--out-dir", required=True, type=Path, help="folder for <figure>.pdf and <figure>.png")
    figures.add_argument("--main", help="comma-separated variants run on every dataset (the rest are ablations)")
    figures.add_argument("--only", help="comma-separated figure names (default: every figure with data)")
    report = subparsers.add_parser("report", help="markdown report: tables, figures, environment, definitions")
    report.add_argument("records", nargs="+", type=Path, help="records files the tables were computed from")
    report.add_argument("--tables", required=True, type=Path, help="folder `summarize --tables-dir` wrote")
    report.add_argument("--figures", required=True, type=Path, help="folder the figures were written to")
    report.add_argument("--metrics", nargs="*", type=Path, help="training metrics (JSON) of the models and drafters")
    report.add_argument("--main", help="comma-separated variants run on every dataset (the rest are ablations)")
    report.add_argument("--compare", help="head-to-head comparisons, VARIANT=AGAINST,... (e.g. prism=eagle)")
    report.add_argument("--published", help="JSON: variant -> its system's own figures (report.published)")
    report.add_argument("--out", required=True, type=Path, help="output markdown file")
    divergence = subparsers.add_parser("divergence", help="how often greedy outputs leave their paired ar output")
    divergence.add_argument("records", nargs="+", type=Path, help="records files written by `run --pair-with-ar`")
    divergence.add_argument("--out", type=Path, help="also write the table as CSV")
    divergence.add_argument("--expect-identical", action="store_true",
                            help="exit non-zero if any output differs (the float32 lossless check)")
    export = subparsers.add_parser("export-specbench", help="write records in Spec-Bench's answer-file layout")
    export.add_argument("records", nargs="+", type=Path, help="records files written by `run`")
    export.add_argument("--out-dir", required=True, type=Path, help="folder for <run>/model_answer/<variant>.jsonl")
    speed = subparsers.add_parser(
        "specbench-speed", help="speedup and mean accepted tokens of an export, computed as Spec-Bench's speed.py does")
    speed.add_argument("--file-path", required=True, type=Path, help="the method's answer file (<variant>.jsonl)")
    speed.add_argument("--base-path", type=Path,
                       help="the baseline's answer file (default: <variant>.ar.jsonl beside it)")
    speed.add_argument("--tokenizer-path",
                       help="count the baseline's tokens from its text with this tokenizer, as speed.py does "
                            "(default: its recorded new_tokens)")
    speed.add_argument("--task", default="overall", help="overall (default), mt_bench, or one category")


def _cmd_methods(args: argparse.Namespace) -> int:
    import dataclasses

    from harness.catalog import catalog, options_type

    for name, item in catalog().items():
        flags = [flag for flag, needed in (("--draft", item.needs_draft), ("--drafter", item.needs_drafter)) if needed]
        needs = f" (needs {' '.join(flags)})" if flags else ""
        origin = f" (plug-in: package {item.plugin})" if item.plugin else ""
        line = f"{name:10s} {item.summary}{needs}{origin}"
        if not args.names_only:
            fields = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(options_type(name)))
            line += f"  [options: {fields}]" if fields else ""
        print(line)
    return 0


def _measure_parser(subparsers: argparse._SubParsersAction) -> None:
    from harness.measure import MEASUREMENTS

    measure = subparsers.add_parser(
        "measure", help="benchmark scripts: " + ", ".join(MEASUREMENTS),
        description="\n".join(f"  {name:15s} {what}" for name, (_, what) in MEASUREMENTS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    measure.add_argument("name", choices=list(MEASUREMENTS), help="the measurement (its own --help lists its flags)")
    measure.add_argument("arguments", nargs=argparse.REMAINDER, help="its flags")
    metrics = subparsers.add_parser("metrics", help="the summary's columns and their definitions (docs/metrics.md)")
    metrics.add_argument("--out", type=Path, help="write the markdown page here instead of printing it")


def _cmd_measure(args: argparse.Namespace) -> int:
    import importlib

    from harness.measure import MEASUREMENTS

    module = importlib.import_module(MEASUREMENTS[args.name][0])
    return int(module.main(args.arguments, prog=f"python -m harness measure {args.name}") or 0)


def _cmd_build_datastore(args: argparse.Namespace) -> int:
    from harness.retrieval.datastore import build_datastore, corpus_tokens, save_datastore

    tokens = corpus_tokens(args.source, args.tokenizer)
    if tokens.size <= args.key_len:
        raise DraftcountError(f"{args.source} holds {tokens.size} tokens: too few for a datastore")
    store = build_datastore(tokens, args.key_len, str(args.source))
    save_datastore(args.out, store)
    print(f"wrote a datastore of {len(store)} tokens (suffixes sorted on {args.key_len}) to {args.out}")
    return 0


def _cmd_metrics(args: argparse.Namespace) -> int:
    from harness.analysis.metrics import metrics_markdown

    page = metrics_markdown()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(page, encoding="utf-8")
        print(f"wrote {args.out}")
    else:
        print(page, end="")
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    from harness.store.hub import drafter_snapshot, link_snapshot, model_snapshot

    snapshot = (model_snapshot if args.kind == "model" else drafter_snapshot)(args.repo_id)
    out = link_snapshot(args.repo_id, snapshot, args.out)
    print(f"{args.repo_id} -> {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description="draftcount speculative-decoding harness")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _run_parser(subparsers)
    train_command.add_parser(subparsers)
    methods = subparsers.add_parser("methods", help="list the catalog's methods (installed plug-ins' included) and "
                                    "their options")
    methods.add_argument("--names-only", action="store_true", help="without options (imports no method code)")
    _reporting_parsers(subparsers)
    _measure_parser(subparsers)
    datastore = subparsers.add_parser("build-datastore", help="a retrieval datastore (reader) from a corpus")
    datastore.add_argument("--source", required=True, type=Path,
                           help="token stream (.pt), .jsonl with a 'text' field per line, or a text file")
    datastore.add_argument("--tokenizer", help="tokenizer directory for a text source (the target's)")
    datastore.add_argument("--key-len", type=int, default=4, help="longest suffix a lookup matches (default 4)")
    datastore.add_argument("--out", required=True, type=Path, help="datastore file to write")
    fetch = subparsers.add_parser("fetch", help="a hub id's files as a local directory (links into the hub cache)")
    fetch.add_argument("repo_id", help="owner/name on the Hugging Face hub")
    fetch.add_argument("--kind", choices=["model", "drafter"], default="model",
                       help="model: weights, config, tokenizer; drafter: an EAGLE head's config and weights")
    fetch.add_argument("--out", required=True, type=Path, help="directory to fill with links")
    gpu_commands.add_parsers(subparsers)
    vlm_command.add_parsers(subparsers)
    store_commands.add_parsers(subparsers)
    data_commands.add_parsers(subparsers)
    analysis_commands.add_parsers(subparsers)
    args = parser.parse_args(argv)
    handlers = {"fetch": _cmd_fetch, "run": _cmd_run, "train": train_command.run, "methods": _cmd_methods, "summarize": _cmd_summarize,
                "figures": _cmd_figures, "report": _cmd_report, "export-specbench": _cmd_export_specbench,
                "specbench-speed": _cmd_specbench_speed,
                "divergence": _cmd_divergence, "measure": _cmd_measure, "metrics": _cmd_metrics,
                "build-datastore": _cmd_build_datastore, **gpu_commands.HANDLERS, **vlm_command.HANDLERS,
                **store_commands.HANDLERS, **data_commands.HANDLERS, **analysis_commands.HANDLERS}
    try:
        return handlers[args.command](args)
    except DraftcountError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
