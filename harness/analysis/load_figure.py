"""The load study's figure: each batched method's speedup over `ar` against the batch size (the A/A control's
beside them, and the 1x line), and beside it the verified tokens per step (the compute each method spends to buy
its tokens, which grows with B), how many of them were rejected (the verify FLOPs wasted), and for each method run
at several tree sizes the size that was fastest at each B, beside the size predicted for each B from the latency
per tokens in the batch (``python -m harness measure load --figure``)."""

from __future__ import annotations

import csv
from pathlib import Path

from harness.analysis.plotting import MARKERS, STYLE, palette, plt, save_figure, shade


def chosen_families(rows: list[dict]) -> list[str]:
    """The catalog methods the study ran at more than one size (variant)."""
    variants: dict[str, set[str]] = {}
    for row in rows:
        if row["catalog_method"] != "ar":
            variants.setdefault(row["catalog_method"], set()).add(row["method"])
    return [family for family, names in variants.items() if len(names) > 1]


def read_load_rows(path: Path) -> list[dict]:
    """The rows of a written load table (``measure load --out``), typed as the sweep returned them: what the figure
    reads, so it can be drawn again from the table alone (``measure load --from-table``)."""
    numbers = ("batch_size", "speedup", "target_tokens_per_step", "wasted_verify_share", "tree_tokens")
    with Path(path).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row.update({key: float(row[key]) if row.get(key) not in (None, "") else float("nan") for key in numbers})
        row["batch_size"] = int(row["batch_size"])
        row["chosen"] = row.get("chosen") == "True"
    return rows


LINESTYLES = ("-", "--", "-.", (0, (1, 1)))  # a method's first, second, ... variant in the study


def variant_rank(rows: list[dict], method: str) -> int:
    """Which of its catalog method's variants ``method`` is, in the rows' order (0: the first)."""
    family = next(row["catalog_method"] for row in rows if row["method"] == method)
    return list(dict.fromkeys(row["method"] for row in rows if row["catalog_method"] == family)).index(method)


def line_style(method: str, family: str, rank: int, colors: dict) -> dict:
    """The catalog method's fixed colour (shaded per further variant), a marker and a line style per variant of it
    (the A/A control: a shade of ar's colour, dotted)."""
    if method == "ar_control":
        return {"color": shade(colors["ar"], 1), "marker": "o", "markersize": 3, "linestyle": ":"}
    return {"color": shade(colors[family], rank), "marker": MARKERS[rank % len(MARKERS)], "markersize": 3,
            "linestyle": LINESTYLES[rank % 4]}


def write_load_figure(rows: list[dict], path: Path) -> list[Path]:
    """Draw the rows ``harness.measure.projections.load.sweep`` returned; ``path``'s stem names the PDF and PNG."""
    colors = palette(["ar", *(row["catalog_method"] for row in rows)])
    methods = list(dict.fromkeys(row["method"] for row in rows if row["method"] != "ar"))
    with plt.rc_context(STYLE):
        figure, (speed, tokens, wasted, chosen) = plt.subplots(1, 4, figsize=(12.8, 2.6), layout="constrained")
        for method in methods:
            mine = sorted((row for row in rows if row["method"] == method), key=lambda row: row["batch_size"])
            sizes = [row["batch_size"] for row in mine]
            style = line_style(method, mine[0]["catalog_method"], variant_rank(rows, method), colors)
            speed.plot(sizes, [row["speedup"] for row in mine], label=method, **style)
            tokens.plot(sizes, [row["target_tokens_per_step"] for row in mine], label=method, **style)
            if method != "ar_control":  # ar rejects nothing: no point on a log axis
                wasted.plot(sizes, [row["wasted_verify_share"] * row["target_tokens_per_step"] for row in mine],
                            label=method, **style)
        for family in chosen_families(rows):
            picked = sorted((row for row in rows if row["catalog_method"] == family and row["chosen"]),
                            key=lambda row: row["batch_size"])
            chosen.plot([row["batch_size"] for row in picked], [row["tree_tokens"] for row in picked], marker="s",
                        markersize=3, color=colors.get(family), label=family)
        for method in dict.fromkeys(row["method"] for row in rows if row.get("predicted_shape")):
            mine = sorted((row for row in rows if row["method"] == method), key=lambda row: row["batch_size"])
            chosen.plot([row["batch_size"] for row in mine], [row["tree_tokens"] for row in mine], marker="^",
                        markersize=3, linestyle="--", color=colors.get(mine[0]["catalog_method"]),
                        label=f"{method} (predicted)")
        shown = [row["tree_tokens"] for row in rows if row["chosen"] or row.get("predicted_shape")]
        chosen.set(xscale="log", xlabel="batch size B", ylabel="tree tokens per row", ylim=(0, 1.25 * max(shown,
                                                                                                        default=1)))
        chosen.set_title("fastest measured (solid), predicted (dashed)", fontsize="small")
        if chosen.lines:
            chosen.legend(fontsize="x-small", frameon=False)
        speed.axhline(1.0, color="black", linewidth=0.6)
        speed.set(xscale="log", xlabel="batch size B", ylabel="speedup over ar (paired)")
        tokens.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="verified tokens per step")
        wasted.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="verified tokens rejected per step")
        for axis in (speed, tokens, wasted, chosen):
            sizes = sorted({row["batch_size"] for row in rows})
            axis.set_xticks(sizes, [str(size) for size in sizes])
            axis.minorticks_off()
        figure.legend(*speed.get_legend_handles_labels(), loc="outside right upper", frameon=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        return save_figure(figure, path.parent, path.stem)
