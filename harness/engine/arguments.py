"""The command line of a method run over a prompt set, shared by ``python -m harness run`` and the measurements that
run one method (``measure verifiers``, ``measure static-tree``): the method and its options, the models, the
prompts, the sampling (temperature, top-k, top-p) and the device. Torch-free: a command parses its arguments before
any model is loaded."""

from __future__ import annotations

import argparse
from typing import Any

from harness.errors import DraftcountError


def add_method_run_arguments(parser: argparse.ArgumentParser, default_method: str | None = None) -> None:
    """--method (required without ``default_method``), --opt, --target, --draft, --drafter, --prompts, --limit,
    --temperature, --top-k, --top-p, --max-new-tokens, --seed, --dtype, --device, --threads, --no-progress."""
    parser.add_argument("--method", required=default_method is None, default=default_method,
                        help="the catalog method (`python -m harness methods`)"
                             + (f"; default {default_method}" if default_method else ""))
    parser.add_argument("--opt", action="append", metavar="KEY=VALUE", help="method option, repeatable (e.g. gamma=4)")
    parser.add_argument("--target", required=True, help="target model: local HF directory or hub id")
    parser.add_argument("--draft", help="draft LM (methods that need one): local HF directory or hub id")
    parser.add_argument("--drafter", help="trained drafter directory (methods that need one)")
    parser.add_argument("--prompts", required=True,
                        help="'humaneval', or a .jsonl/.txt file (or a directory holding one)")
    parser.add_argument("--limit", type=int, help="keep only the first N prompts")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=0, help="sampling: keep the k likeliest tokens (0 = off)")
    parser.add_argument("--top-p", type=float, default=1.0, help="sampling: nucleus mass (1.0 = off)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def check_at_least(value: int | None, floor: int, option: str) -> None:
    """One line for an integer option below ``floor`` (None: the option was not given)."""
    if value is not None and value < floor:
        raise DraftcountError(f"{option} must be >= {floor}, got {value}")


def checked_run_arguments(args: argparse.Namespace) -> Any:
    """Every number of a method run in range before any model is loaded, one line for the first that is not:
    the sampling (``sampling_of``), --max-new-tokens, --limit, --seed and --threads. Returns the sampling."""
    sampling = sampling_of(args)
    check_at_least(args.max_new_tokens, 1, "--max-new-tokens")
    check_at_least(args.limit, 1, "--limit")
    check_at_least(args.seed, 0, "--seed")
    check_at_least(args.threads, 1, "--threads")
    return sampling


def sampling_of(args: argparse.Namespace) -> Any:
    """The run's ``SamplingConfig`` (validated: one line for a bad temperature, top-k or top-p)."""
    from harness.verify.sampling import SamplingConfig

    return SamplingConfig(args.temperature, args.top_k, args.top_p)
