"""``python -m harness train``: one drafter trained by its method's trainer, held against its quality gates."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.catalog import methods_needing
from harness.errors import DraftcountError
from harness.options import parse_key_values


def trainable_methods() -> str:
    """The catalog's methods with a trained drafter (plug-ins' included), for the help; a broken catalog or plug-in
    is left to the commands that read it (``methods``, ``run``, ``train``), which say so in one line."""
    try:
        return ", ".join(methods_needing("drafter"))
    except DraftcountError:
        return "see python -m harness methods"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    trainable = trainable_methods()
    train = subparsers.add_parser("train", help=f"train a drafter ({trainable}) on a target's features")
    train.add_argument("--method", required=True, help=f"a method with a trained drafter: {trainable}")
    train.add_argument("--target", required=True, help="target model: local HF directory or hub id")
    train.add_argument("--data", required=True, type=Path,
                       help="feature dump directory (index.json) or token stream (.pt) for features on the fly")
    train.add_argument("--out", required=True, type=Path, help="drafter directory to write")
    train.add_argument("--steps", type=int, help="optimizer steps (default 1000; 0 = write a fresh drafter)")
    train.add_argument("--budget-tokens", type=int,
                       help="instead of --steps: train on this many supervised target positions (the steps follow "
                            "from batch_size x grad_accum x processes x seq_len a step; docs/extending.md)")
    train.add_argument("--time-budget-s", type=float, default=0.0,
                       help="exploration only: also stop after this many seconds (0 = none; the drafter then depends "
                            "on the machine's speed)")
    train.add_argument("--gate", action="append", metavar="KEY=VALUE",
                       help="quality gate on the held-out metrics, e.g. min_heldout_agreement=0.2 (repeatable)")
    train.add_argument("--allow-weak", action="store_true", help="a drafter beyond a gate is a warning, not an error")
    train.add_argument("--opt", action="append", metavar="KEY=VALUE", help="training option, repeatable")
    train.add_argument("--heldout", type=Path, help="token stream (.pt) to report held-out agreement on")
    train.add_argument("--checkpoint", type=Path, help="resumable checkpoint file")
    train.add_argument("--metrics", type=Path, help="write the training metrics (JSON) here")
    train.add_argument("--device", default="cpu")
    train.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    import json

    from harness.engine.method_spec import method_spec
    from harness.training.drafters import DrafterTrainRequest, write_metrics
    from harness.training.gates import apply_gates

    spec = method_spec(args.method)
    if spec.train is None:
        raise DraftcountError(f"method '{args.method}' has no trained drafter")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.steps is not None and args.budget_tokens is not None:
        raise DraftcountError("give --steps or --budget-tokens, not both")
    if args.budget_tokens is not None and args.budget_tokens < 1:
        raise DraftcountError(f"--budget-tokens must be >= 1, got {args.budget_tokens}")
    steps = {} if args.steps is None else {"steps": args.steps}  # none given: the request's default
    request = DrafterTrainRequest(
        method=args.method, target=args.target, data=args.data, out=args.out, **steps,
        budget_tokens=args.budget_tokens or 0,
        time_budget_s=args.time_budget_s, options=parse_key_values(args.opt), heldout=args.heldout,
        device=args.device, checkpoint=args.checkpoint, progress=not args.no_progress,
    )
    metrics = apply_gates(f"drafter {args.out.name}", spec.train(request),
                          {key: float(value) for key, value in parse_key_values(args.gate).items()}, args.allow_weak)
    if args.metrics:
        write_metrics(args.metrics, metrics)
    print(json.dumps({key: value for key, value in metrics.items() if key != "options"}, default=str))
    print(f"wrote {args.method} drafter to {args.out}")
    return 0
