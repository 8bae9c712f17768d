"""A projection of the load study to the GPU: each method's speedup over `ar` at batch size B from a latency table
measured at Llama-3.1-8B shapes (``measure project-8b``'s ``latency.csv``, say an H100's) and the acceptance the
load study measured per request.

Per (method, B) of the load table:

    verify seconds   = target(tokens in the batch per step: the load study's verified tokens per step, all rows)
    drafting seconds = the method's cost model at batch 1 (``METHOD.cost``: its drafter steps in the table)
    projected        = tau x target(B) / (drafting + verify)     (ar: one token per row per step at target(B))

It assumes what it cannot measure, and every row says so: acceptance carries over from the small models; a
batched drafter step costs what one row's does (small drafters stay memory-bound at these B); the extra rows' KV
reads are left out (at 1,024 cached tokens about 0.04 ms per row at an H100's 3.35 TB/s, a few per cent of a
verify forward at B <= 8). A B whose tokens per step pass the table's largest size is not projected (nan) rather
than extrapolated.

    python -m harness measure project-load --load results/load/load.csv --summary results/tables/summary.csv \\
        --latency results/h100-2026-11-24/projection/latency.csv --timing cuda_graphs --out-dir results/load/h100
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

from harness.engine.method_spec import Latencies
from harness.errors import DraftcountError
from harness.measure.projections.projection import drafting_seconds
from harness.store.atomic import atomic_path


def latencies_of(table: pd.DataFrame, timing: str) -> Latencies:
    """The ``latency.csv`` rows of one timing as ``Latencies`` (milliseconds to seconds)."""
    rows = table[table.timing == timing]
    if rows.empty:
        raise DraftcountError(f"the latency table has no {timing!r} rows (it has {', '.join(table.timing.unique())})")
    target = {int(row.tokens): row.ms / 1e3 for row in rows.itertuples() if row.component == "target"}
    draft = {int(row.tokens): row.ms / 1e3 for row in rows.itertuples() if row.component == "draft_lm"}
    steps = rows[~rows.component.isin(["target", "draft_lm"])]
    return Latencies(target, draft, int(steps.tokens.iloc[0]) if len(steps) else 0,
                     {row.component: row.ms / 1e3 for row in steps.itertuples()})


def project_load(load: pd.DataFrame, latencies: Latencies, basis: str) -> pd.DataFrame:
    """One row per (method, B) of the load table but the A/A control, with the projected speedup over `ar` (each
    row's drafting by the cost model of its ``catalog_method`` with its ``options``)."""
    largest = max(latencies.target)
    rows = []
    for row in load[load.method != "ar_control"].itertuples():
        method, options = row.catalog_method, json.loads(row.options)
        tokens = float(row.target_tokens_per_step)
        drafting = 0.0 if method == "ar" else drafting_seconds(method, options, latencies)
        covered = tokens <= largest and row.batch_size <= largest
        verify = latencies.target_at(tokens) if covered else math.nan
        ar_step = latencies.target_at(row.batch_size) if covered else math.nan
        rows.append({
            "method": row.method, "batch_size": row.batch_size, "tokens_in_batch": tokens, "tau": row.tau,
            "measured_speedup": row.speedup, "draft_ms": drafting * 1e3, "verify_ms": verify * 1e3,
            "ar_ms": ar_step * 1e3, "projected_speedup": row.tau * ar_step / (drafting + verify),
            "basis": basis if covered else f"{basis}; not projected: {tokens:.0f} tokens per step pass the "
                                           f"table's {largest}",
        })
    return pd.DataFrame(rows)


def plot(projection: pd.DataFrame, out_dir: Path, label: str, families: dict[str, str] | None = None) -> list[Path]:
    """Projected speedup against B per method (solid), beside the CPU load study's measured one (dotted); each in
    its catalog method's colour (``families``: {method: catalog method}), a further variant of one in a shade of it
    with its own marker."""
    from harness.analysis.plotting import MARKERS, STYLE, palette, plt, save_figure, shade

    families = {method: (families or {}).get(method, method) for method in projection.method.unique()}
    colors = palette(families.values())
    ranks = {method: list(dict.fromkeys(m for m in families if families[m] == family)).index(method)
             for method, family in families.items()}
    with plt.rc_context(STYLE):
        figure, axis = plt.subplots(figsize=(4.6, 2.6), layout="constrained")
        for method, rows in projection[projection.method != "ar"].groupby("method", sort=False):
            rows = rows.sort_values("batch_size")
            color, marker = shade(colors[families[method]], ranks[method]), MARKERS[ranks[method] % len(MARKERS)]
            projected = rows.projected_speedup.notna().any()
            if projected:
                axis.plot(rows.batch_size, rows.projected_speedup, marker=marker, markersize=3.5, color=color,
                          label=method)
            axis.plot(rows.batch_size, rows.measured_speedup, marker=marker, markersize=2.5, linestyle=":",
                      color=color, label=None if projected else f"{method} (measured only)")
        sizes = sorted(projection.batch_size.unique())
        axis.axhline(1.0, color="black", linewidth=0.6)
        axis.set(xscale="log", xlabel="batch size B", ylabel="speedup over ar")
        axis.set_title("solid: projected; dotted: measured (CPU)", fontsize="small")
        axis.set_xticks(sizes, [str(size) for size in sizes])
        axis.minorticks_off()
        figure.legend(loc="outside right upper", frameon=False, fontsize="small",
                      title=label.replace(", ", "\n"), title_fontsize="x-small", alignment="left")
        return save_figure(figure, out_dir, "projection")


SUFFIX = ", acceptance from the CPU load study"  # the end of every row's basis


def redraw(table: Path, load_table: Path, out_dir: Path) -> int:
    """``--from-projection``: the figure again from a written projection.csv (its label from the rows' basis, the
    methods' catalog methods from the load table), nothing projected."""
    for path in (table, load_table):
        if not path.is_file():
            raise DraftcountError(f"no table {path}")
    projection, load = pd.read_csv(table), pd.read_csv(load_table)
    label = str(projection.basis.iloc[0]).removeprefix("projection: ").split(SUFFIX)[0]
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in plot(projection, out_dir, label, dict(zip(load.method, load.catalog_method))):
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None, prog: str = "python -m harness measure project-load") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", required=True, type=Path, help="the load study's table (measure load --out)")
    parser.add_argument("--latency", type=Path, help="latency.csv of measure project-8b (required)")
    parser.add_argument("--timing", default="cuda_graphs", help="which of the table's timings (default cuda_graphs)")
    parser.add_argument("--label", default="Llama-3.1-8B shapes, latency table", help="what the latencies are")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--from-projection", type=Path,
                        help="project nothing: draw projection.{pdf,png} in --out-dir again from this projection.csv")
    args = parser.parse_args(argv)
    if args.from_projection:
        return redraw(args.from_projection, args.load, args.out_dir)
    if args.latency is None:
        parser.error("--latency is required")
    for path in (args.load, args.latency):
        if not path.is_file():
            raise DraftcountError(f"no table {path}")
    latencies = latencies_of(pd.read_csv(args.latency), args.timing)
    basis = f"projection: {args.label}, {args.timing}{SUFFIX}"
    load = pd.read_csv(args.load)
    projection = project_load(load, latencies, basis)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out_dir / "projection.csv") as partial:
        projection.to_csv(partial, index=False, float_format="%.4f")
    print(projection.pivot_table(index="method", columns="batch_size", values="projected_speedup", sort=False)
          .to_string(float_format=lambda value: f"{value:.2f}"))
    families = dict(zip(load.method, load.catalog_method))
    for path in plot(projection, args.out_dir, f"{args.label}, {args.timing}", families):
        print(f"wrote {path}")
    print(f"wrote {args.out_dir / 'projection.csv'}")
    return 0
