"""What a measurement that runs one method over a prompt set takes from its command line, and the loading."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.backend.models import LoadedModel, load_model
from harness.data.prompts import Prompt, encode_turn, load_prompts
from harness.engine.adapter import DraftAdapter
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.options import parse_key_values
from harness.verify.sampling import SamplingConfig


def add_method_arguments(parser: argparse.ArgumentParser, default_method: str) -> None:
    parser.add_argument("--method", default=default_method, help=f"the catalog method (default: {default_method})")
    parser.add_argument("--opt", action="append", metavar="KEY=VALUE", help="method option, repeatable")
    parser.add_argument("--target", required=True, help="target model directory or hub id")
    parser.add_argument("--draft", help="draft LM directory (methods that need one)")
    parser.add_argument("--drafter", help="trained drafter directory (methods that need one)")
    parser.add_argument("--prompts", required=True, help="prompt set (.jsonl/.txt, or humaneval)")
    parser.add_argument("--limit", type=int, default=0, help="first N prompts only (0: all)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--no-progress", action="store_true")


@dataclass
class MethodRun:
    target: LoadedModel
    adapter: DraftAdapter
    prompts: list[Prompt]
    sampling: SamplingConfig

    def prompt_ids(self, prompt: Prompt) -> torch.Tensor:
        return torch.tensor([encode_turn(self.target.tokenizer, [], prompt.turns[0])])


def load_method_run(args: argparse.Namespace) -> MethodRun:
    """The target, the method's adapter and the prompts the arguments name."""
    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_model(args.target, args.dtype, args.device)
    draft = load_model(args.draft, args.dtype, args.device) if args.draft else None
    adapter, _ = build_adapter(args.method, parse_key_values(args.opt),
                               BuildInputs(target, draft, Path(args.drafter) if args.drafter else None))
    return MethodRun(target, adapter, load_prompts(args.prompts, None, args.limit or None),
                     SamplingConfig(args.temperature))
