"""Generation throughput of a chat target answering its training questions, per batch size: what sets
``regenerate.batch_size`` (the answers a real target writes for its drafters, rule regenerate_chat).

Every batch size answers the same first ``--limit`` questions of a question file with the code the workflow runs
(``harness.training.regenerate.regenerate_chat``: the first half greedily, the rest sampled at T = 1, left-padded
batches in order of length, one cached forward per token until every row of a batch has stopped), and the table
gives answer tokens per second: tokens the target wrote (through each answer's end-of-turn token), over the seconds
it took, so a batch's padding and its rows that stopped early count as the time they cost. Seconds are the process's
CPU seconds (with ``--threads 1``: what one core gives, however loaded the machine: other work beside it takes cores,
not this process's CPU time, though it still shares caches and memory bandwidth) and wall seconds. Batch sizes run
in turn, after one untimed question (warm-up) when ``--warmup``; the table records the machine (CPU model), torch
threads and the load average before and after each row.

    python -m harness measure generation-throughput --target work-smollm2/models/target \
        --prompts work-smollm2/prompts/chat-train.jsonl --limit 128 --batch-sizes 8,16,32,64 --threads 1 \
        --out results/smollm2/tables/generation_throughput.csv
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from harness.backend.models import eos_ids, load_model
from harness.data.prompts import load_prompts
from harness.errors import DraftcountError
from harness.store.atomic import write_csv
from harness.store.records import environment
from harness.training.regenerate import RegenerateOptions, regenerate_chat

FIELDS = ["batch_size", "questions", "greedy_share", "new_tokens", "answer_tokens", "cpu_seconds", "wall_seconds",
          "answer_tokens_per_cpu_s", "cpu_ms_per_answer_token", "answer_tokens_per_wall_s", "cpu_hours_per_250k_tokens",
          "threads", "load_before", "load_after", "cpu"]


def parse_batch_sizes(text: str) -> list[int]:
    """``8,16,32`` -> [8, 16, 32]; one line for anything else."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise DraftcountError(f"--batch-sizes {text!r}: give whole numbers >= 1, comma-separated (8,16,32)")
    return sizes


def throughput_row(batch_size: int, stats: dict, seconds: tuple[float, float], options: RegenerateOptions,
                   load: tuple[float, float]) -> dict:
    """One table row: answer tokens per CPU second (the process's, all its threads: with one torch thread what a
    core gives however loaded the machine is) and per wall second, and the CPU hours 250,000 of them take."""
    tokens, (cpu, wall) = int(stats["answer_tokens"]), seconds
    rate = tokens / cpu if cpu > 0 else 0.0
    return {"batch_size": batch_size, "questions": stats["prompts"], "greedy_share": options.greedy_share,
            "new_tokens": options.new_tokens, "answer_tokens": tokens, "cpu_seconds": round(cpu, 2),
            "wall_seconds": round(wall, 2), "answer_tokens_per_cpu_s": round(rate, 2),
            "cpu_ms_per_answer_token": round(1000 / rate, 2) if rate else "",
            "answer_tokens_per_wall_s": round(tokens / wall, 2) if wall > 0 else "",
            "cpu_hours_per_250k_tokens": round(250_000 / rate / 3600, 2) if rate else "",
            "threads": torch.get_num_threads(), "load_before": round(load[0], 2), "load_after": round(load[1], 2),
            "cpu": environment()["hardware"]["cpu"]}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="the chat target's directory")
    parser.add_argument("--prompts", required=True, type=Path, help="a question file (rule chat_prompts' train split)")
    parser.add_argument("--limit", type=int, default=128, help="questions each batch size answers (default 128)")
    parser.add_argument("--batch-sizes", default="8,16,32,64", help="comma-separated (default 8,16,32,64)")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens per answer at most (default 256)")
    parser.add_argument("--greedy-share", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", action="store_true", help="one untimed batch first")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch CPU threads (the workflow's `threads`)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--out", required=True, type=Path, help="the CSV table to write")
    args = parser.parse_args(argv)
    sizes = parse_batch_sizes(args.batch_sizes)
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = load_prompts(str(args.prompts), limit=args.limit)
    if len(prompts) < args.limit:
        raise DraftcountError(f"{args.prompts} holds {len(prompts)} questions, --limit {args.limit} asked")
    target = load_model(args.target, "float32", args.device)
    stops = eos_ids(target)
    if args.warmup:
        regenerate_chat(target.model, target.tokenizer, prompts[:1], RegenerateOptions(new_tokens=8), stops, False)
    rows = []
    for size in sizes:
        options = RegenerateOptions(new_tokens=args.new_tokens, greedy_share=args.greedy_share, batch_size=size,
                                    seed=args.seed, shard_size=size)
        before, started, cpu_started = os.getloadavg()[0], time.perf_counter(), time.process_time()
        _, stats = regenerate_chat(target.model, target.tokenizer, prompts, options, stops, not args.no_progress)
        seconds = (time.process_time() - cpu_started, time.perf_counter() - started)
        rows.append(throughput_row(size, stats, seconds, options, (before, os.getloadavg()[0])))
        print(rows[-1], flush=True)
        write_csv(args.out, rows, FIELDS)  # each row as soon as it is measured
    return 0


if __name__ == "__main__":
    main()
