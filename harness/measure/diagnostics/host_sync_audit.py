"""Audit: host synchronisations per decoding step, for every method, by phase of the step.

A read of a device tensor's value on the host (``.item()``, ``.tolist()``,
``bool(t)``, ...) and a blocking copy of a host-made tensor to the device
(``torch.tensor(data, device=...)``, ``host_t.to(device)``, indexing a device
tensor with a host tensor) both wait for all queued GPU work: a host
synchronisation. The verifier's read of the target's choices is the one a step
needs; everything else is overhead. ``harness.measure.diagnostics.host_sync`` emulates which
tensors live on the host and which on the device, so the counts of a CPU run
are a prediction of a GPU run's (see its docstring for the rules).

Columns: syncs_per_step (all), reads_per_step (reads of device values),
h2d_per_step (host-to-device copies), cuda_reported_per_step (on a CUDA device:
synchronising CUDA calls as PyTorch itself reports them, which also sees
syncs inside its kernels' host code; blank elsewhere), then all predicted
syncs by phase; each row ends with the counts by operation. ``--where`` also prints, per operation, the
source lines that made them.

    python -m harness measure host-sync                      # random target, fresh drafters, CPU
    python -m harness measure host-sync --where              # ... with the source line of each count
    python -m harness measure host-sync --target DIR --draft DIR --drafter eagle=DIR --drafter lyanna=DIR \\
        --device cuda --dtype bfloat16 --out audit.csv
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch


from harness.store.atomic import write_csv
from harness.verify.sampling import SamplingConfig
from harness.backend.models import load_model
from harness.measure.diagnostics.host_sync import PHASES, audit_generation
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.options import parse_key_values
from harness.measure.method_runs import (
    VariantSpec, add_variant_arguments, build_variant, parse_variants, save_random_models, table_variants,
)

VARIANTS = {"ar": ("ar", {}), "sd": ("sd", {"gamma": 4}), "tree_sd": ("tree_sd", {}), "eagle": ("eagle", {}),
            "lyanna": ("lyanna", {}), "lyanna_overlap": ("lyanna", {"reuse": "states", "overlap": "on"})}


def random_models(root: Path, vocab: int = 512) -> tuple[str, str, str, str]:
    """A random 4-layer target, a random 2-layer draft LM and fresh (untrained) EAGLE and Lyanna drafters."""
    drafters = save_random_models(root, ["eagle", "lyanna"], vocab)
    return str(root / "target"), str(root / "draft"), str(drafters["eagle"]), str(drafters["lyanna"])


def default_variants(with_draft: bool, drafters: dict[str, str | None]) -> list[VariantSpec]:
    """The built-in table's variants whose models are given (one line for each left out)."""
    given, lacking = table_variants(VARIANTS, with_draft, drafters)
    for variant, what in lacking.items():
        print(f"{variant}: skipped (no {what} given)")
    return given


def print_sites(sites: dict[str, dict[str, float]]) -> None:
    """Per operation, the call sites that made it and how often per step (``--where``)."""
    for operation, by_site in sites.items():
        print(f"    {operation}")
        for site, per_step in by_site.items():
            print(f"      {per_step:5.2f}  {site}")


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", help="target model directory (default: random models built here)")
    parser.add_argument("--draft", help="draft LM directory (sd, tree_sd)")
    parser.add_argument("--drafter", action="append", metavar="METHOD=DIR",
                        help="a trained drafter directory of a method, repeatable (eagle=DIR, lyanna=DIR)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--kv-cache", default="dynamic", choices=["dynamic", "static"])
    parser.add_argument("--max-new-tokens", type=int, default=48)
    add_variant_arguments(parser)
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    parser.add_argument("--where", action="store_true", help="print the source lines that make each count")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        if args.target:
            given = parse_key_values(args.drafter)
            paths = (args.target, args.draft, given.get("eagle"), given.get("lyanna"))
        else:
            paths = random_models(Path(scratch))
        target = load_model(paths[0], args.dtype, args.device, with_tokenizer=False)
        draft = load_model(paths[1], args.dtype, args.device, with_tokenizer=False) if paths[1] else None
        drafters = {"eagle": paths[2], "lyanna": paths[3]}
        runtime = EngineRuntime(target, EngineOptions(kv_cache=args.kv_cache))
        # host: the prompt, the same on every device (generate moves it)
        prompt = torch.randint(0, target.vocab_size, (1, 24), generator=torch.Generator(device="cpu").manual_seed(1))
        rows = []
        for spec in parse_variants(args.variant) or default_variants(draft is not None, drafters):
            variant, adapter = spec.name, build_variant(spec, target, draft)
            for temperature in (0.0, 1.0):
                audit = audit_generation(target, adapter, prompt.to(target.device), args.max_new_tokens,
                                         SamplingConfig(temperature), runtime,
                                         torch.Generator(device=target.device).manual_seed(0), where=args.where)
                rows.append({"variant": variant, "temperature": temperature, "steps": audit.steps,
                             "syncs_per_step": round(audit.per_step, 2),
                             "reads_per_step": round(audit.reads_per_step, 2),
                             "h2d_per_step": round(audit.h2d_per_step, 2),
                             "cuda_reported_per_step": ("" if audit.cuda_reported_per_step is None
                                                        else round(audit.cuda_reported_per_step, 2)),
                             **{phase: round(audit.by_phase[phase], 2) for phase in PHASES},
                             "operations": " ".join(f"{k}={v:.2f}" for k, v in audit.by_operation.items()),
                             "sites": audit.sites})
    header = ["variant", "temperature", "steps", "syncs_per_step", "reads_per_step", "h2d_per_step",
              "cuda_reported_per_step", *PHASES]
    print(f"host synchronisations per decoding step predicted for {target.device} ({args.dtype}, {args.kv_cache} KV "
          "cache)")
    print("  ".join(f"{name:>14}" for name in header))
    for row in rows:
        print("  ".join(f"{row[name]!s:>14}" for name in header), " ", row["operations"])
        print_sites(row["sites"])
    if args.out:
        write_csv(args.out, rows, [*header, "operations"], extra="ignore")


if __name__ == "__main__":
    main()
