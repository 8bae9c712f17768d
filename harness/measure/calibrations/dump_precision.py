"""Does a half-precision feature dump train the same drafter as a float32 one? (issue 80: the dump, read once by
every family, is stored at ``features.dtype: float16``.)

``--sequences`` random windows (seeded by ``--seed``) of the target's training tokens get the target's features
once, in float32 (``harness.training.features.dump_features``); a copy rounds every feature to float16 (the token
ids stay). One drafter family (default eagle) trains on each dump with its own trainer (``python -m harness
train``'s: the same options, seed, steps and batch, so both see the same rows in the same order) and is evaluated
on the same 16 held-out windows, their features computed by the target in float32 for both. The table gives per
precision and draft step the held-out top-1 agreement (the drafter kit's ``heldout_top1_agreement_by_step``), the
dump's bytes on disk (bytes per position x positions), the steps, positions and seconds trained, and per step the
difference float16 - float32 with a paired percentile bootstrap 95% interval over the held-out windows (each
window's agreement under both drafters resampled together; ``harness.analysis.summary.bootstrap_interval``). A
family evaluated outside the drafter kit (pard, polybasic) has no per-window agreement: no interval.

With ``--work-dir`` the dumps, drafters, checkpoints and each training's metrics stay there and a rerun resumes
(a finished training is read back, not rerun); without, they go to a temporary folder.

    python -m harness measure dump-precision --target work/models/target --tokens work/data/tokens/train.pt \\
        --heldout work/data/tokens/heldout.pt --family eagle --steps 200 --opt lr=0.01 --opt batch_size=8 \\
        --sequences 256 --threads 1 --out /tmp/dump_precision.csv
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from safetensors.torch import save_file
from tqdm import tqdm

from harness.analysis.summary import bootstrap_interval
from harness.backend.models import load_model
from harness.data.token_streams import load_tokens
from harness.engine.method_spec import method_spec
from harness.errors import DraftcountError
from harness.options import parse_key_values
from harness.store.atomic import atomic_path, write_csv
from harness.store.files import load_weights, read_json
from harness.training.drafter_contract import AGREEMENT, AGREEMENT_BY_WINDOW
from harness.training.drafters import DrafterTrainRequest, write_metrics
from harness.training.features import DTYPES, dump_features, dump_size_bytes, parse_feature_layers

PRECISIONS = ("float32", "float16")  # the reference first
FIELDS = ["family", "precision", "step", "agreement", "diff_vs_float32", "diff_ci_low", "diff_ci_high",
          "heldout_windows", "dump_bytes", "bytes_per_position", "positions", "train_steps", "train_tokens",
          "train_seconds"]


def rounded_copy(source: Path, out: Path, dtype: str, progress: bool = True) -> dict:
    """The dump at ``source`` with every feature cast to ``dtype`` (token ids unchanged) written to ``out``; its
    index (``dtype`` and ``bytes`` updated)."""
    index = read_json(source / "index.json", "feature dump index")
    out.mkdir(parents=True, exist_ok=True)
    for name in tqdm(index["shards"], desc=f"{dtype} copy", unit="shard", disable=not progress):
        shard = load_weights(source / name, "feature shard")
        cast = {key: value if key == "input_ids" else value.to(DTYPES[dtype]).contiguous()
                for key, value in shard.items()}
        with atomic_path(out / name) as partial:
            save_file(cast, str(partial))
    size = dump_size_bytes(index["sequences"], index["seq_len"], index["hidden_size"], len(index["layers"]),
                           DTYPES[dtype])
    copy = {**index, "dtype": dtype, "bytes": size}
    (out / "index.json").write_text(json.dumps(copy, indent=2) + "\n")
    return copy


def disk_bytes(dump: Path) -> int:
    """Bytes on disk of a dump's shards (their safetensors headers included)."""
    index = read_json(dump / "index.json", "feature dump index")
    return sum((dump / name).stat().st_size for name in index["shards"])


def same_training(runs: dict[str, dict]) -> None:
    """Every precision trained the same steps on the same positions (one line naming the first that did not)."""
    first, *others = runs
    for precision in others:
        for key in ("steps", "tokens"):
            if runs[precision]["train"][key] != runs[first]["train"][key]:
                raise DraftcountError(f"the {precision} drafter trained {runs[precision]['train'][key]} {key}, the "
                                      f"{first} one {runs[first]['train'][key]}: not the same training")


def paired_differences(runs: dict[str, dict], reference: str, other: str) -> np.ndarray | None:
    """(windows, steps): each held-out window's agreement under ``other`` minus under ``reference``; None when a
    run holds no per-window agreement."""
    if AGREEMENT_BY_WINDOW not in runs[reference] or AGREEMENT_BY_WINDOW not in runs[other]:
        return None
    return np.asarray(runs[other][AGREEMENT_BY_WINDOW], float) - np.asarray(runs[reference][AGREEMENT_BY_WINDOW], float)


def table_rows(family: str, runs: dict[str, dict], dumps: dict[str, tuple[int, int]],
               resamples: int = 2000) -> list[dict]:
    """One row per precision and draft step (``runs``: precision -> training metrics, float32 first; ``dumps``:
    precision -> (bytes on disk, positions)); the other precisions' rows carry their difference from float32 and
    its paired bootstrap interval."""
    reference = next(iter(runs))
    rows = []
    for precision, metrics in runs.items():
        differences = paired_differences(runs, reference, precision) if precision != reference else None
        size, positions = dumps[precision]
        for step, agreement in enumerate(metrics[AGREEMENT], start=1):
            row = {"family": family, "precision": precision, "step": step, "agreement": round(agreement, 6),
                   "heldout_windows": len(metrics.get(AGREEMENT_BY_WINDOW, [])) or "", "dump_bytes": size,
                   "bytes_per_position": round(size / positions, 2), "positions": positions,
                   "train_steps": metrics["train"]["steps"], "train_tokens": metrics["train"]["tokens"],
                   "train_seconds": round(metrics["train"]["seconds"], 2)}
            if precision != reference:
                row["diff_vs_float32"] = round(agreement - runs[reference][AGREEMENT][step - 1], 6)
                if differences is not None:
                    low, high = bootstrap_interval(differences[:, step - 1], resamples=resamples)
                    row.update(diff_ci_low=round(low, 6), diff_ci_high=round(high, 6))
            rows.append(row)
    return rows


def prepared_dumps(args: argparse.Namespace, work: Path) -> dict[str, Path]:
    """The float32 dump and its rounded copies under ``work``; a dump already there for the same settings is kept
    (another check's dumps stop the run with one line)."""
    settings = {"target": str(args.target), "tokens": str(args.tokens), "sequences": args.sequences,
                "seq_len": args.seq_len, "layers": list(args.layers), "seed": args.seed}
    recorded = work / "settings.json"
    if recorded.is_file() and read_json(recorded, "dump-precision settings") != settings:
        raise DraftcountError(f"{work} holds the dumps of another dump-precision check ({recorded}); give another "
                              f"--work-dir")
    work.mkdir(parents=True, exist_ok=True)
    recorded.write_text(json.dumps(settings, indent=2) + "\n")
    dumps = {precision: work / f"dump-{precision}" for precision in PRECISIONS}
    if not (dumps["float32"] / "index.json").is_file():
        target = load_model(str(args.target), "float32", args.device, with_tokenizer=False).model
        dump_features(target, load_tokens(args.tokens), dumps["float32"], args.sequences, args.seq_len,
                      list(args.layers), args.shard_size, "float32", args.seed, source=str(args.tokens))
    for precision in PRECISIONS[1:]:
        if not (dumps[precision] / "index.json").is_file():
            rounded_copy(dumps["float32"], dumps[precision], precision, not args.no_progress)
    return dumps


def trained(args: argparse.Namespace, dump: Path, out: Path) -> dict:
    """The family's training metrics on ``dump`` (its drafter in ``out``); read back when a finished run with the
    same request left them there."""
    length = {"budget_tokens": args.budget_tokens} if args.budget_tokens else {"steps": args.steps}
    request = DrafterTrainRequest(method=args.family, target=str(args.target), data=dump, out=out / "drafter",
                                  options=parse_key_values(args.opt), heldout=args.heldout, device=args.device,
                                  checkpoint=out / "checkpoint.pt", progress=not args.no_progress, by_window=True,
                                  **length)
    key = {"family": args.family, "data": str(dump), "heldout": str(args.heldout), "options": request.options, **length}
    saved = out / "metrics.json"
    if saved.is_file() and (previous := read_json(saved, "dump-precision metrics")).get("request") == key:
        return previous["metrics"]
    metrics = method_spec(args.family).train(request)
    write_metrics(saved, {"request": key, "metrics": metrics})
    return metrics


def checked(args: argparse.Namespace) -> argparse.Namespace:
    """The arguments, held to what the check needs (one line for the first that is not)."""
    if args.sequences < 1 or args.seq_len < 2 or args.shard_size < 1:
        raise DraftcountError(f"--sequences and --shard-size must be >= 1 and --seq-len >= 2, got {args.sequences}, "
                              f"{args.shard_size} and {args.seq_len}")
    if (args.budget_tokens is not None and args.budget_tokens < 1) or args.steps < 1:
        raise DraftcountError(f"--steps and --budget-tokens must be >= 1, got {args.steps} and {args.budget_tokens}")
    for path in (args.tokens, args.heldout):
        if not path.is_file():
            raise DraftcountError(f"token stream {path} does not exist")
    if method_spec(args.family).train is None:
        raise DraftcountError(f"method {args.family!r} has no trained drafter")
    args.layers = parse_feature_layers(tuple(part for part in args.layers.split(",") if part))
    if not args.layers:
        raise DraftcountError("--layers names no feature layer (e.g. last, or last,2,14)")
    return args


def main(argv: list[str] | None = None, prog: str = "python -m harness measure dump-precision") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="the target's directory")
    parser.add_argument("--tokens", required=True, type=Path, help="its training token stream (.pt)")
    parser.add_argument("--heldout", required=True, type=Path, help="a held-out token stream (.pt): 16 windows")
    parser.add_argument("--family", default="eagle", help="a method with a trained drafter (default eagle)")
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    parser.add_argument("--budget-tokens", type=int, help="instead of --steps: supervised positions (as train's)")
    parser.add_argument("--opt", action="append", metavar="KEY=VALUE", help="training option, repeatable")
    parser.add_argument("--sequences", type=int, default=256, help="dumped windows (default 256)")
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per dumped window (default 256)")
    parser.add_argument("--layers", default="last", help="feature layers dumped, comma-separated (default last)")
    parser.add_argument("--shard-size", type=int, default=64, help="windows per dump shard (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="draws the dumped windows (default 0)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument("--work-dir", type=Path, help="dumps, drafters, checkpoints (default: a temporary folder)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--out", required=True, type=Path, help="the CSV table to write")
    args = checked(parser.parse_args(argv))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="dump-precision-") as scratch:
        work = args.work_dir or Path(scratch)
        dumps = prepared_dumps(args, work)
        runs = {precision: trained(args, dumps[precision], work / f"train-{precision}") for precision in PRECISIONS}
        same_training(runs)
        positions = args.sequences * args.seq_len
        sizes = {precision: (disk_bytes(dumps[precision]), positions) for precision in PRECISIONS}
    rows = table_rows(args.family, runs, sizes, args.resamples)
    write_csv(args.out, rows, FIELDS)
    for precision, (size, count) in sizes.items():
        print(f"{precision} dump: {size:,} bytes on disk = {size / count:.1f} bytes/position x {count:,} positions")
    for row in rows:
        interval = f" [{row['diff_ci_low']:+.4f}, {row['diff_ci_high']:+.4f}]" if "diff_ci_low" in row else ""
        change = f"  {row['diff_vs_float32']:+.4f}{interval}" if "diff_vs_float32" in row else ""
        print(f"{row['family']} {row['precision']} step {row['step']}: agreement {row['agreement']:.4f}{change}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    main()
