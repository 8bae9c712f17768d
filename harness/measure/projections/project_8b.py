"""Latency table at Llama-3.1-8B shapes (random weights) and the speedups it projects from measured acceptance.

    python -m harness measure project-8b --summary results/tables/summary.csv --out-dir results/projection \
        --device cuda --dtype bfloat16                          # on a GPU: the 8B-shape table (a few minutes)
    python -m harness measure project-8b --summary results/tables/summary.csv --out-dir /tmp/projection \
        --scale 32 --repeats 3                                  # the same code at 1/32 of the shapes, on CPU

Writes latency.csv (ms per target forward for 1 and 8..128 tree tokens after --prefix tokens, per draft-LM
forward, and per drafter step of each method whose cost model measures one (an EAGLE expansion, a Lyanna
depth); one set per --timing: eager on transformers' DynamicCache, and on CUDA also eager on a static KV cache and replayed from CUDA graphs on it, as a serving engine runs
them; each random model is built once for all timings), projection.csv (per timing and summary row:
measured tau and speedup, projected drafting and verification ms per step, projected speedup) and
projection.{pdf,png} (from the last timing named: CUDA graphs on a GPU).
The projection assumes the small models' acceptance carries over to 8B scale; it is labelled as such.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch


from harness.store.atomic import atomic_path
from harness.backend.models import resolve_dtype
from harness.engine.method_spec import Latencies
from harness.backend.timed import TIMINGS
from harness.measure.calibrations.latency import target_latencies
from harness.measure.projections.projection import drafter_step_latencies, project_speedups
from harness.measure.shapes import SHAPES, scaled_shape, shaped_llama


def measure(args: argparse.Namespace, timings: list[str]) -> tuple[dict[str, Latencies], dict[str, str]]:
    """Every timing's latencies, in the order named (CUDA graphs last by default, so that a capture that breaks
    the process's CUDA state cannot cost the others), with both random models built once and kept for all of
    them; a timing that fails is left out and reported (raised when it is the only one)."""
    dtype, device = resolve_dtype(args.dtype), args.device
    sizes = [int(size) for size in args.sizes.split(",")]
    draft_sizes = [size for size in sizes if size <= 16] or [1]
    target = shaped_llama(scaled_shape(SHAPES["llama-3.1-8b"], args.scale), dtype, device)
    draft = shaped_llama(scaled_shape(SHAPES["llama-3.2-1b"], args.scale), dtype, device)
    billions = [sum(p.numel() for p in model.parameters()) / 1e9 for model in (target, draft)]
    print(f"target {billions[0]:.2f}B and draft {billions[1]:.2f}B parameters, {args.dtype} on {device}, "
          f"timings {', '.join(timings)}", flush=True)
    measured, failed = {}, {}
    for timing in timings:
        try:
            measured[timing] = Latencies(
                target=target_latencies(target, args.prefix, sizes, args.repeats, timing),
                draft_lm=target_latencies(draft, args.prefix, draft_sizes, args.repeats, timing),
                top_k=args.top_k,
                drafter_steps=drafter_step_latencies(target, args.top_k, args.prefix, args.repeats, timing,
                                                     args.draft_vocab))
        except Exception as error:  # noqa: BLE001 - one timing's failure must not lose the others' tables
            if len(timings) == 1:
                raise
            failed[timing] = f"{type(error).__name__}: {error}"
            print(f"{timing} timing FAILED ({failed[timing]}); the tables hold the other timings", flush=True)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return measured, failed


def plot(projection: pd.DataFrame, out_dir: Path, label: str) -> None:
    """Per temperature, one labelled row per variant (the figures' fixed order): its measured speedup (grey) over its
    projected one (its method's colour), each the mean over datasets."""
    import textwrap

    from harness.analysis.plot_rows import label_rows, row_positions, rows_figure, slot_count
    from harness.analysis.plotting import STYLE, edge_color, plt, save_figure, variant_colors, variant_order

    table = projection.dropna(subset=["projected_speedup"])
    table = table.groupby(["variant", "method", "temperature"], as_index=False)[
        ["measured_speedup", "projected_speedup"]].mean()
    colors, variants = variant_colors(table), variant_order(table)
    bars, centres = row_positions([2] * len(variants))
    with plt.rc_context(STYLE):
        temperatures = sorted(table.temperature.unique())
        figure, axes = rows_figure(slot_count([2] * len(variants)), len(temperatures), panel_width=2.4, sharex=True)
        for axis, temperature in zip(axes, temperatures):
            rows = table[table.temperature == temperature].set_index("variant")
            for variant, (measured, projected) in zip(variants, bars):
                if variant in rows.index:
                    axis.barh(measured, rows.at[variant, "measured_speedup"], 0.9, color="0.8", edgecolor="0.45",
                              linewidth=0.4)
                    axis.barh(projected, rows.at[variant, "projected_speedup"], 0.9, color=colors[variant],
                              edgecolor=edge_color(colors[variant]), linewidth=0.4)
            axis.axvline(1.0, color="black", linewidth=0.7, linestyle=":")
            axis.set_title("greedy (T = 0)" if temperature == 0 else f"T = {temperature:g}")
            axis.set_xlabel("speedup over ar\n(mean over datasets)")
            axis.xaxis.grid(True)
        label_rows(axes[0], variants, centres)
        handles = [plt.Rectangle((0, 0), 1, 1, facecolor="0.8", edgecolor="0.45"),
                   plt.Rectangle((0, 0), 1, 1, facecolor="0.35", edgecolor="0.2")]
        figure.legend(handles, ["measured\n(small models, this machine)",
                                "projected, in the\nmethod's colour\n(" + textwrap.fill(label, 28) + ")"],
                      loc="outside right upper", frameon=False)
        save_figure(figure, out_dir, "projection")


def redraw(table: Path, out_dir: Path) -> None:
    """``--from-projection``: projection.{pdf,png} again from a written projection.csv (its last timing, as drawn
    when measured), nothing measured."""
    if not table.is_file():
        raise SystemExit(f"no projection table {table}")
    projection = pd.read_csv(table)
    shown = projection.timing.iloc[-1]
    rows = projection[projection.timing == shown]
    out_dir.mkdir(parents=True, exist_ok=True)
    plot(rows, out_dir, str(rows.basis.iloc[0]).removeprefix("projection: "))
    print(f"wrote {out_dir}/projection.pdf/png ({shown}, from {table})")


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summary", type=Path, help="summary CSV with the measured acceptance (required)")
    parser.add_argument("--from-projection", type=Path,
                        help="measure nothing: draw projection.{pdf,png} in --out-dir again from this projection.csv")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--scale", type=int, default=1, help="divide every width, head count and layer count by this")
    parser.add_argument("--prefix", type=int, default=1024, help="tokens in the KV cache before each timed forward")
    parser.add_argument("--sizes", default="1,8,16,32,64,128", help="tree sizes (tokens per target forward)")
    parser.add_argument("--top-k", type=int, default=10, help="nodes per EAGLE expansion / per Lyanna depth")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--draft-vocab", type=int, default=0,
                        help="the drafters' logits over this many tokens (draft_vocab; 0: the whole vocabulary)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--timing", default=None,
                        help="comma-separated: eager (forwards launched from Python on a DynamicCache), static (the "
                             "same on a preallocated KV cache) and/or cuda_graphs (replayed from CUDA graphs on that "
                             "static cache); default all three on CUDA, eager elsewhere")
    args = parser.parse_args(argv)
    if args.from_projection:
        return redraw(args.from_projection, args.out_dir)
    if args.summary is None or not args.summary.is_file():
        parser.error(f"no summary table {args.summary} (run the workflow first)")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.timing is None:
        args.timing = ",".join(TIMINGS) if args.device.startswith("cuda") else "eager"
    timings = [item for item in args.timing.split(",") if item]
    unknown = sorted(set(timings) - set(TIMINGS))
    if unknown or not timings:
        parser.error(f"--timing takes a comma-separated subset of {', '.join(TIMINGS)}, got {args.timing!r}")
    if "cuda_graphs" in timings and not args.device.startswith("cuda"):
        parser.error("--timing cuda_graphs needs --device cuda")
    label = "Llama-3.1-8B shapes" if args.scale == 1 else f"Llama-3.1-8B shapes / {args.scale}"
    label += f", {args.dtype}, {torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'}"
    summary = pd.read_csv(args.summary, keep_default_na=False, na_values=[""])
    measured, failed = measure(args, timings)
    tables, projections = [], []
    for timing, latencies in measured.items():
        tables.append(latencies.table().assign(timing=timing))
        projection = project_speedups(summary, latencies)
        projection.insert(0, "timing", timing)
        projection.insert(0, "basis", f"projection: {label}, {timing}")
        projections.append(projection)
    if not tables:
        raise SystemExit(f"every timing failed: {failed}")
    timings = [timing for timing in timings if timing not in failed]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    table, projection = pd.concat(tables, ignore_index=True), pd.concat(projections, ignore_index=True)
    with atomic_path(args.out_dir / "latency.csv") as partial:
        table.to_csv(partial, index=False, float_format="%.4f")
    with atomic_path(args.out_dir / "projection.csv") as partial:
        projection.to_csv(partial, index=False, float_format="%.4f")
    shown = timings[-1]  # the last named: CUDA graphs where measured, the way a serving engine runs the forwards
    plot(projection[projection.timing == shown], args.out_dir, f"{label}, {shown}")
    print(table.pivot_table(index=["component", "tokens"], columns="timing", values="ms", sort=False)
          .to_string(float_format=lambda v: f"{v:.3f}"))
    print(projection.groupby(["timing", "variant", "temperature"])[["measured_speedup", "projected_speedup"]]
          .mean().to_string(float_format=lambda v: f"{v:.2f}"))
    if failed:
        raise SystemExit(f"wrote the tables without these timings: {failed}")
    print(f"wrote {args.out_dir}/latency.csv, projection.csv, projection.pdf/png ({label})")


if __name__ == "__main__":
    main()
