"""``python -m harness synth-questions | chat-prompts | regenerate | data-table | evaluate-target``: what drafters
learn from when the target is not trained here, and its regime figures. ``synth-questions`` has the target write
user questions (``harness.training.synth_questions``), ``chat-prompts`` picks chat questions apart from the
benchmark's and joins those (``harness.data.chat_prompts``), ``regenerate`` has the target answer them (or continue
corpus windows), ``data-table`` tabulates the training set by source (``harness.data.data_table``),
``evaluate-target`` measures an imported target's repetition and sampling entropy on its own answers."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness.errors import DraftcountError
from harness.options import parse_key_values


def _benchmark_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", action="append", default=[], metavar="NAME=PATH",
                        help="a prompt file by name (bench.dataset_paths), repeatable")
    parser.add_argument("--benchmark", action="append", default=[], metavar="NAME[:CATEGORIES][@LIMIT]",
                        help="a benchmark prompt set as the bench jobs select it (categories, limit, --stratify), "
                             "repeatable")
    parser.add_argument("--stratify", action="store_true", help="the benchmark's limits are spread over categories")
    parser.add_argument("--near", type=float, default=0.5,
                        help="a question whose word 3-grams have a Jaccard similarity >= this with a kept one's is a "
                             "near duplicate (default 0.5)")


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    chat = subparsers.add_parser("chat-prompts", help="chat questions for a target's training answers, none of them "
                                 "sharing a turn or a word 8-gram with the benchmark's prompts")
    _benchmark_arguments(chat)
    chat.add_argument("--source", action="append", required=True, metavar="NAME[:CATEGORIES]",
                      help="where the questions come from (first turns), repeatable")
    chat.add_argument("--synthesized", type=Path, help="questions the target wrote (synth-questions), joined to the "
                      "last split")
    chat.add_argument("--split", action="append", required=True, metavar="NAME=COUNT",
                      help="questions per split, in order (heldout=16, ..., train=all: every question left), "
                           "repeatable")
    chat.add_argument("--seed", type=int, default=0)
    chat.add_argument("--out-dir", required=True, type=Path, help="writes chat-<split>.jsonl there")
    chat.add_argument("--summary", required=True, type=Path, help="what each split holds (JSON)")

    regen = subparsers.add_parser("regenerate", help="the target's own answers to chat prompts (--prompts) or "
                                  "continuations of a token stream's windows (--tokens): training data for drafters "
                                  "(drafters.<name>.data: regenerate)")
    regen.add_argument("--target", required=True, help="target model: local HF directory or hub id")
    source = regen.add_mutually_exclusive_group(required=True)
    source.add_argument("--tokens", type=Path, help="token stream (.pt) the prompts are cut from")
    source.add_argument("--prompts", type=Path, help="chat questions (a question file): each first turn is answered")
    regen.add_argument("--out", required=True, type=Path, help="token stream (.pt) to write")
    regen.add_argument("--summary", type=Path, help="also write what it holds and how long it took (JSON)")
    regen.add_argument("--sequences", type=int, default=128, help="--tokens: prompts continued (default 128)")
    regen.add_argument("--prompt-len", type=int, default=32, help="--tokens: tokens per prompt (default 32)")
    regen.add_argument("--new-tokens", type=int, default=96,
                       help="tokens the target adds to each (--prompts: at most, an answer ends at its end-of-turn "
                            "token; default 96)")
    regen.add_argument("--greedy-share", type=float, default=0.5,
                       help="share of the prompts continued greedily; the rest sampled at T=1 (default 0.5)")
    regen.add_argument("--batch-size", type=int, default=16, help="prompts per batched decode (default 16)")
    regen.add_argument("--seed", type=int, default=0)
    regen.add_argument("--shard-size", type=int, default=64,
                       help="--prompts: questions per resumable shard (default 64, whole batches)")
    regen.add_argument("--shard-dir", type=Path,
                       help="--prompts: where finished shards are kept until the stream is written (default: "
                            "<out>.shards); a rerun continues from them")
    regen.add_argument("--workers", type=int, default=1,
                       help="--prompts: processes answering shards side by side, --threads split among them "
                            "(default 1; on a CPU two 1-thread workers answer faster than one 2-thread process)")
    regen.add_argument("--part", type=int, help=argparse.SUPPRESS)  # a worker's share of the shards (internal)
    regen.add_argument("--device", default="cpu")
    regen.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    regen.add_argument("--no-progress", action="store_true", help="no progress bar")

    synth = subparsers.add_parser("synth-questions", help="user questions the target writes through its chat "
                                  "template (Magpie), filtered and deduplicated, none near the benchmark's")
    _benchmark_arguments(synth)
    synth.add_argument("--target", required=True, help="the chat target's directory")
    synth.add_argument("--count", type=int, default=512, help="questions to keep (default 512)")
    synth.add_argument("--max-generated", type=int, default=2048, help="questions to write at most (default 2048)")
    synth.add_argument("--max-tokens", type=int, default=96, help="tokens a question may take (default 96)")
    synth.add_argument("--temperature", type=float, default=1.0)
    synth.add_argument("--top-p", type=float, default=0.95)
    synth.add_argument("--min-words", type=int, default=3)
    synth.add_argument("--max-words", type=int, default=200)
    synth.add_argument("--min-ascii-letters", type=float, default=0.95,
                       help="the share of a question's letters that must be ASCII (default 0.95)")
    synth.add_argument("--batch-size", type=int, default=32)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--device", default="cpu")
    synth.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    synth.add_argument("--no-progress", action="store_true", help="no progress bar")
    synth.add_argument("--out", required=True, type=Path, help="the question file to write")
    synth.add_argument("--summary", required=True, type=Path, help="what was written, kept and dropped (JSON)")

    table = subparsers.add_parser("data-table", help="a chat target's training data by source (data.csv) and its "
                                  "synthesized questions' filters (data_filters.csv)")
    _benchmark_arguments(table)
    table.add_argument("--chat-summary", required=True, type=Path, help="chat-prompts' summary")
    table.add_argument("--synth-summary", type=Path, help="synth-questions' summary")
    table.add_argument("--regenerate-summary", required=True, type=Path, help="the training split's regenerate summary")
    table.add_argument("--questions", action="append", required=True, type=Path,
                       help="a split's question file (the training split's first), repeatable")
    table.add_argument("--out-dir", required=True, type=Path, help="writes data.csv (and data_filters.csv) there")

    evaluate = subparsers.add_parser("evaluate-target", help="an imported target's regime figures (repetition, "
                                     "entropy) on its answers to held-out chat questions: the report's regime card")
    evaluate.add_argument("--target", required=True, help="the imported target's directory")
    evaluate.add_argument("--prompts", required=True, type=Path, help="held-out chat questions (a question file)")
    evaluate.add_argument("--limit", type=int, default=8, help="questions answered (default 8)")
    evaluate.add_argument("--new-tokens", type=int, default=64, help="tokens per answer at most (default 64)")
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--device", default="cpu")
    evaluate.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    evaluate.add_argument("--out", required=True, type=Path, help="the metrics file (JSON) to write")


def _counts(pairs: list[str], flag: str) -> dict[str, int | None]:
    counts: dict[str, int | None] = {}
    for name, value in parse_key_values(pairs).items():
        if str(value) == "all":
            counts[name] = None
        elif not str(value).isdigit() or int(value) < 1:
            raise DraftcountError(f"{flag} {name}={value}: the count must be a whole number >= 1 or all")
        else:
            counts[name] = int(value)
    return counts


def _benchmark(args: argparse.Namespace) -> tuple[dict[str, str], list]:
    """(the prompt files by name, every benchmark prompt as the bench jobs select them)."""
    from harness.data.prompts import load_prompts

    paths = {name: str(value) for name, value in parse_key_values(args.path).items()}
    benchmark = []
    for spec in args.benchmark:  # NAME[:CATEGORIES][@LIMIT], as the bench jobs select the set
        selection, _, limit = spec.partition("@")
        name, _, category = selection.partition(":")
        benchmark += load_prompts(paths.get(name, name), category or None, limit=int(limit) if limit else None,
                                  stratify=args.stratify)
    return paths, benchmark


def _write_json(path: Path, summary: dict) -> None:
    from harness.store.atomic import atomic_path

    with atomic_path(path) as partial:
        partial.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def _cmd_chat_prompts(args: argparse.Namespace) -> int:
    from collections import Counter

    from harness.data.chat_prompts import (
        categories_of,
        first_turns,
        load_sources,
        source_of,
        training_prompts,
        write_question_file,
    )
    from harness.data.prompts import load_prompts

    paths, benchmark = _benchmark(args)
    synthesized = first_turns(load_prompts(str(args.synthesized)), "synth") if args.synthesized else None
    selection = training_prompts(load_sources(args.source, paths), benchmark, _counts(args.split, "--split"),
                                 args.seed, synthesized, args.near)
    summary = {"seed": args.seed, "near_duplicate_jaccard": args.near, "synthesized": str(args.synthesized or ""),
               "benchmark": {"sets": args.benchmark, "prompts": len(benchmark),
                             "turns": sum(len(prompt.turns) for prompt in benchmark)},
               "sources": {source: {"offered": offered,
                                    "dropped": dict(sorted(selection.dropped.get(source, {}).items()))}
                           for source, offered in selection.offered.items()},
               "splits": {}}
    for name, prompts in selection.splits.items():
        sha256 = write_question_file(prompts, args.out_dir / f"chat-{name}.jsonl")
        sources = dict(sorted(Counter(map(source_of, prompts)).items()))
        summary["splits"][name] = {"prompts": len(prompts), "sha256": sha256, "sources": sources,
                                   "categories": categories_of(prompts)}
    _write_json(args.summary, summary)
    print(json.dumps({name: split["sources"] for name, split in summary["splits"].items()}))
    return 0


def _cmd_synth_questions(args: argparse.Namespace) -> int:
    import torch

    from harness.backend.models import eos_ids, load_model
    from harness.data.chat_prompts import write_question_file
    from harness.data.prompts import Prompt
    from harness.data.question_filters import FormBounds, benchmark_selector
    from harness.training.synth_questions import (
        SynthOptions,
        synth_questions,
        user_turn_prefix,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    bounds = FormBounds(args.min_words, args.max_words, args.min_ascii_letters)
    options = SynthOptions(args.count, args.max_generated, args.max_tokens, args.temperature, args.top_p,
                           args.batch_size, args.seed, bounds)
    _, benchmark = _benchmark(args)
    target = load_model(args.target, "float32", args.device)
    selector = benchmark_selector([turn for prompt in benchmark for turn in prompt.turns], args.near)
    questions, stats = synth_questions(target.model, target.tokenizer, options, eos_ids(target), selector,
                                       progress=not args.no_progress)
    write_question_file([Prompt(f"{index:05d}", "synthesized", (text,)) for index, text in enumerate(questions)],
                        args.out)
    minutes, cpu_minutes = stats["seconds"] / 60, stats["cpu_seconds"] / 60
    summary = {**stats, "count": args.count, "max_generated": args.max_generated, "seed": args.seed,
               "sampling": {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_tokens},
               "bounds": {"min_words": args.min_words, "max_words": args.max_words,
                          "min_ascii_letters": args.min_ascii_letters},
               "language": f"Latin script: at least {args.min_ascii_letters:.0%} of a question's letters ASCII",
               "near_duplicate_jaccard": args.near, "batch_size": args.batch_size, "threads": torch.get_num_threads(),
               "benchmark_prompts": len(benchmark),
               "user_turn_prefix": target.tokenizer.decode(user_turn_prefix(target.tokenizer)),
               "kept_per_minute": round(stats["kept"] / minutes, 2) if minutes else None,
               "kept_per_cpu_minute": round(stats["kept"] / cpu_minutes, 2) if cpu_minutes else None}
    _write_json(args.summary, summary)
    if stats["kept"] < args.count:
        print(f"warning: {stats['kept']} questions kept of {args.count} wanted after {stats['written']} written "
              "(raise --max-generated)")
    print(json.dumps({key: summary[key] for key in ("written", "kept", "filtered", "dropped", "kept_per_cpu_minute")}))
    return 0


def _cmd_data_table(args: argparse.Namespace) -> int:
    from collections import Counter

    from harness.data.chat_prompts import source_of
    from harness.data.data_table import (
        DATA_FIELDS,
        FILTER_FIELDS,
        data_rows,
        filter_rows,
    )
    from harness.data.prompts import load_prompts
    from harness.data.question_filters import shared_ngrams
    from harness.store.atomic import write_csv

    _, benchmark = _benchmark(args)
    splits = [load_prompts(str(path)) for path in args.questions]
    overlap = shared_ngrams([prompt.turns[0] for split in splits for prompt in split],
                            [turn for prompt in benchmark for turn in prompt.turns])
    chat = json.loads(args.chat_summary.read_text(encoding="utf-8"))
    synth = json.loads(args.synth_summary.read_text(encoding="utf-8")) if args.synth_summary else None
    regenerate = json.loads(args.regenerate_summary.read_text(encoding="utf-8"))
    rows = data_rows(chat, synth, regenerate, Counter(map(source_of, splits[0])), overlap)
    write_csv(args.out_dir / "data.csv", rows, DATA_FIELDS)
    if synth:
        write_csv(args.out_dir / "data_filters.csv", filter_rows(synth), FILTER_FIELDS)
    print(json.dumps(rows[-1]))
    return 0


def _cmd_regenerate(args: argparse.Namespace) -> int:
    import torch

    from harness.backend.models import eos_ids, load_model
    from harness.data.prompts import load_prompts
    from harness.data.token_streams import load_tokens, save_tokens
    from harness.training.answer_shards import open_shards
    from harness.training.regenerate import (
        RegenerateOptions,
        answer_shards,
        plan_chat_answers,
        regenerate,
        regenerate_chat,
    )

    if args.workers < 1 or (args.workers > 1 and args.prompts is None):
        raise DraftcountError("--workers must be >= 1, and more than 1 only with --prompts")
    if args.threads:
        torch.set_num_threads(args.threads)
    options = RegenerateOptions(args.sequences, args.prompt_len, args.new_tokens, args.greedy_share,
                                args.batch_size, args.seed, args.shard_size)
    shard_dir = args.shard_dir or args.out.with_name(args.out.name + ".shards")
    if args.tokens is not None and not args.tokens.is_file():
        raise DraftcountError(f"token stream {args.tokens} does not exist")
    started = time.perf_counter()
    target = load_model(args.target, "float32", args.device, with_tokenizer=args.prompts is not None)
    if args.prompts is not None:
        prompts = load_prompts(str(args.prompts))
        if args.workers > 1:
            plan = plan_chat_answers(target.model, target.tokenizer, prompts, options, eos_ids(target))
            finished = open_shards(shard_dir, plan.key)  # the folder's manifest, before any worker opens it
            if args.part is not None:  # a worker: its shards written, no stream
                answer_shards(target.model, plan, options, finished, shard_dir, (args.part, args.workers),
                              progress=not args.no_progress)
                return 0
            run_answer_workers(args, shard_dir)
        stream, summary = regenerate_chat(target.model, target.tokenizer, prompts, options, eos_ids(target),
                                          progress=not args.no_progress, shard_dir=shard_dir)
    else:
        stream = regenerate(target.model, load_tokens(args.tokens), options, progress=not args.no_progress)
        summary = {"sequences": options.sequences, "greedy": options.greedy_sequences,
                   "prompt_len": options.prompt_len}
    seconds = time.perf_counter() - started
    save_tokens(args.out, stream)
    if args.prompts is not None and shard_dir.is_dir():
        shutil.rmtree(shard_dir)  # the stream is whole: its shards are no longer needed
    summary = {**summary, "tokens": int(stream.numel()), "new_tokens": options.new_tokens, "seed": options.seed,
               "seconds": round(seconds, 3), "threads": torch.get_num_threads(), "workers": args.workers}
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary))
    print(f"wrote the target's own text ({stream.numel()} tokens) to {args.out}")
    return 0


def run_answer_workers(args: argparse.Namespace, shard_dir: Path) -> None:
    """``args.workers`` copies of this command, each answering its part of the shards into ``shard_dir`` with
    ``--threads`` split among them; an error names the worker that failed."""
    threads = max(1, (args.threads or 1) // args.workers)
    common = [sys.executable, "-m", "harness", "regenerate", "--target", args.target, "--prompts", str(args.prompts),
              "--out", str(args.out), "--new-tokens", str(args.new_tokens), "--greedy-share", str(args.greedy_share),
              "--batch-size", str(args.batch_size), "--seed", str(args.seed), "--shard-size", str(args.shard_size),
              "--shard-dir", str(shard_dir), "--device", args.device, "--threads", str(threads),
              "--workers", str(args.workers), *(["--no-progress"] if args.no_progress else [])]
    workers = [subprocess.Popen([*common, "--part", str(part)]) for part in range(args.workers)]
    codes = [worker.wait() for worker in workers]
    failed = [part for part, code in enumerate(codes) if code != 0]
    if failed:
        raise DraftcountError(f"regenerate: answer worker(s) {failed} of {args.workers} failed (exit {codes}); "
                              f"their finished shards are kept in {shard_dir}, a rerun continues")


def _cmd_evaluate_target(args: argparse.Namespace) -> int:
    import torch

    from harness.data.prompts import load_prompts
    from harness.training.zoo_training import evaluate_imported_target

    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = load_prompts(str(args.prompts), limit=args.limit)
    metrics = evaluate_imported_target(Path(args.target), prompts, args.new_tokens, args.seed, args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({key: metrics[key] for key in ("degeneracy", "sampling")}))
    return 0


HANDLERS = {"chat-prompts": _cmd_chat_prompts, "regenerate": _cmd_regenerate,
            "evaluate-target": _cmd_evaluate_target, "synth-questions": _cmd_synth_questions,
            "data-table": _cmd_data_table}
