"""``python -m harness vlm-target | vlm-draft | vlm-features | vlm-prompts | vlm-report``: the vision-language zoo and its bar-chart
prompts (``harness.training.vlm``, ``harness.data.bar_charts``; the `vlm` study's rules run them)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.errors import DraftcountError

SHAPE_FLAGS = ("vision_hidden", "vision_layers", "vision_heads", "vision_intermediate", "hidden_size", "num_layers",
               "num_heads", "intermediate_size")


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    for name, role in (("vlm-target", "the LLaVA-style target, trained on bar charts"),
                       ("vlm-draft", "the text-only draft LM, trained on the charts' tokens without their pixels")):
        parser = subparsers.add_parser(name, help=f"train {role}")
        parser.add_argument("--tokenizer", required=True, type=Path, help="tokenizer directory (the zoo's)")
        parser.add_argument("--out", required=True, type=Path, help="model directory to write")
        parser.add_argument("--steps", type=int, required=True, help="optimizer steps (fixed: same model anywhere)")
        parser.add_argument("--batch-size", type=int, default=16)
        parser.add_argument("--lr", type=float, default=2e-3)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--shape", default="{}", help="JSON object of VlmShape fields: " + ", ".join(SHAPE_FLAGS))
        parser.add_argument("--min-image-accuracy", type=float, default=0.0,
                            help="gate: held-out teacher-forced accuracy on the image-determined tokens (target)")
        parser.add_argument("--threads", type=int)
        parser.add_argument("--no-progress", action="store_true")
    features = subparsers.add_parser("vlm-features", help="the VLM target's hidden states on charts it reads, as a "
                                     "feature dump for drafter training")
    features.add_argument("--target", required=True, type=Path)
    features.add_argument("--out", required=True, type=Path)
    features.add_argument("--charts", type=int, default=256)
    features.add_argument("--seq-len", type=int, default=128)
    features.add_argument("--layers", default="0,1,last", help="comma-separated: 'last', or layer outputs (0: input "
                          "embeddings)")
    features.add_argument("--drop-image", action="store_true", help="leave the image positions out (HiViS)")
    features.add_argument("--seed", type=int, default=1)
    features.add_argument("--threads", type=int)
    report = subparsers.add_parser("vlm-report", help="the vlm study's table: tau, paired speedup, and accepted drafts "
                                   "split into image-determined and template tokens")
    report.add_argument("--records", required=True, nargs="+", type=Path, help="JSONL records of the study's runs")
    report.add_argument("--tokenizer", required=True, type=Path, help="the VLM target's tokenizer directory")
    report.add_argument("--out", required=True, type=Path, help="markdown file to write (a .csv beside it)")
    prompts = subparsers.add_parser("vlm-prompts", help="a bar-chart prompt set: images and question.jsonl")
    prompts.add_argument("--out", required=True, type=Path)
    prompts.add_argument("--count", type=int, default=24)
    prompts.add_argument("--seed", type=int, default=7)


def _shape(text: str):
    from harness.training.vlm import VlmShape

    try:
        fields = json.loads(text)
        return VlmShape(**fields)
    except (json.JSONDecodeError, TypeError) as error:
        raise DraftcountError(f"--shape must be a JSON object of {', '.join(SHAPE_FLAGS)}: {error}") from None


def _threads(args: argparse.Namespace) -> None:
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


def run_model(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from harness.training.vlm import train_vlm_draft, train_vlm_target

    _threads(args)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    trainer = train_vlm_target if args.command == "vlm-target" else train_vlm_draft
    metrics = trainer(tokenizer, args.out, _shape(args.shape), args.steps, args.batch_size, args.lr, args.seed,
                      progress=not args.no_progress)
    accuracy = metrics["heldout"]["image_token_accuracy"]
    print(json.dumps(metrics["heldout"]))
    if args.command == "vlm-target" and accuracy < args.min_image_accuracy:
        raise DraftcountError(f"vlm target: held-out accuracy on the image-determined tokens {accuracy:.3f} < "
                              f"{args.min_image_accuracy} (the gate): it cannot read the charts; train longer")
    return 0


def run_features(args: argparse.Namespace) -> int:
    from harness.backend.models import load_model
    from harness.training.features import parse_feature_layers
    from harness.training.vlm import dump_vlm_features

    _threads(args)
    target = load_model(str(args.target), "float32", "cpu")
    layers = list(parse_feature_layers(tuple(args.layers.split(","))))
    index = dump_vlm_features(target.model, target.tokenizer, args.out, args.charts, args.seq_len, layers, args.seed,
                              args.drop_image)
    print(f"wrote {index['sequences']} rows of {index['seq_len']} to {args.out}")
    return 0


def run_prompts(args: argparse.Namespace) -> int:
    from harness.data.bar_charts import write_prompt_set

    print(f"wrote {write_prompt_set(args.out, args.count, args.seed)}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from harness.analysis.vlm import vlm_markdown, vlm_table

    table = vlm_table(args.records, AutoTokenizer.from_pretrained(args.tokenizer))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out.with_suffix(".csv"), index=False)
    args.out.write_text(vlm_markdown(table))
    print(args.out.read_text())
    return 0


HANDLERS = {"vlm-target": run_model, "vlm-draft": run_model, "vlm-features": run_features,
            "vlm-prompts": run_prompts, "vlm-report": run_report}
