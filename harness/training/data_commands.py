"""``python -m harness chat-prompts | regenerate | evaluate-target``: what drafters learn from when the target is
not trained here, and its regime figures. ``chat-prompts`` picks chat questions apart from the benchmark's
(``harness.data.chat_prompts``), ``regenerate`` has the target answer them (or continue corpus windows),
``evaluate-target`` measures an imported target's repetition and sampling entropy on its own answers."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness.errors import DraftcountError
from harness.options import parse_key_values


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    chat = subparsers.add_parser("chat-prompts", help="chat questions for a target's training answers, none of them "
                                 "sharing a turn with the benchmark's prompts")
    chat.add_argument("--path", action="append", default=[], metavar="NAME=PATH",
                      help="a prompt file by name (bench.dataset_paths), repeatable")
    chat.add_argument("--source", action="append", required=True, metavar="NAME[:CATEGORIES]",
                      help="where the questions come from (first turns), repeatable")
    chat.add_argument("--benchmark", action="append", default=[], metavar="NAME[@LIMIT]",
                      help="a benchmark prompt set as the bench jobs select it (limit, --stratify), repeatable")
    chat.add_argument("--stratify", action="store_true", help="the benchmark's limits are spread over categories")
    chat.add_argument("--split", action="append", required=True, metavar="NAME=COUNT",
                      help="questions per split, in order (train=256, heldout=16, ...), repeatable")
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
    regen.add_argument("--device", default="cpu")
    regen.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    regen.add_argument("--no-progress", action="store_true", help="no progress bar")

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


def _counts(pairs: list[str], flag: str) -> dict[str, int]:
    counts = {}
    for name, value in parse_key_values(pairs).items():
        if not str(value).isdigit() or int(value) < 1:
            raise DraftcountError(f"{flag} {name}={value}: the count must be a whole number >= 1")
        counts[name] = int(value)
    return counts


def _cmd_chat_prompts(args: argparse.Namespace) -> int:
    from harness.data.chat_prompts import categories_of, load_sources, training_prompts, write_question_file
    from harness.data.prompts import load_prompts

    paths = {name: str(value) for name, value in parse_key_values(args.path).items()}
    benchmark = []
    for spec in args.benchmark:
        name, _, limit = spec.partition("@")
        benchmark += load_prompts(paths.get(name, name), limit=int(limit) if limit else None, stratify=args.stratify)
    splits = training_prompts(load_sources(args.source, paths), benchmark, _counts(args.split, "--split"), args.seed)
    summary = {"sources": args.source, "seed": args.seed,
               "benchmark": {"sets": args.benchmark, "prompts": len(benchmark),
                             "turns": sum(len(prompt.turns) for prompt in benchmark)},
               "splits": {}}
    for name, prompts in splits.items():
        sha256 = write_question_file(prompts, args.out_dir / f"chat-{name}.jsonl")
        summary["splits"][name] = {"prompts": len(prompts), "sha256": sha256, "categories": categories_of(prompts)}
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary["splits"]))
    return 0


def _cmd_regenerate(args: argparse.Namespace) -> int:
    import torch

    from harness.backend.models import eos_ids, load_model
    from harness.data.prompts import load_prompts
    from harness.data.token_streams import load_tokens, save_tokens
    from harness.training.regenerate import RegenerateOptions, regenerate, regenerate_chat

    if args.threads:
        torch.set_num_threads(args.threads)
    options = RegenerateOptions(args.sequences, args.prompt_len, args.new_tokens, args.greedy_share,
                                args.batch_size, args.seed)
    if args.tokens is not None and not args.tokens.is_file():
        raise DraftcountError(f"token stream {args.tokens} does not exist")
    started = time.perf_counter()
    target = load_model(args.target, "float32", args.device, with_tokenizer=args.prompts is not None)
    if args.prompts is not None:
        prompts = load_prompts(str(args.prompts))
        stream, summary = regenerate_chat(target.model, target.tokenizer, prompts, options, eos_ids(target),
                                          progress=not args.no_progress)
    else:
        stream = regenerate(target.model, load_tokens(args.tokens), options, progress=not args.no_progress)
        summary = {"sequences": options.sequences, "greedy": options.greedy_sequences,
                   "prompt_len": options.prompt_len}
    seconds = time.perf_counter() - started
    save_tokens(args.out, stream)
    summary = {**summary, "tokens": int(stream.numel()), "new_tokens": options.new_tokens, "seed": options.seed,
               "seconds": round(seconds, 3), "threads": torch.get_num_threads()}
    if args.summary:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary))
    print(f"wrote the target's own text ({stream.numel()} tokens) to {args.out}")
    return 0


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
            "evaluate-target": _cmd_evaluate_target}
