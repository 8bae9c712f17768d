"""The load study's figure: each batched method's speedup over `ar` against the batch size (the A/A control's
beside them, and the 1x line), and beside it the verified tokens per step (the compute each method spends to buy
its tokens, which grows with B) and how many of them were rejected: the verify FLOPs wasted
(``python -m harness measure load --figure``)."""

from __future__ import annotations

from pathlib import Path

from harness.analysis.figures import STYLE, method_colors, plt, save_figure


def write_load_figure(rows: list[dict], path: Path) -> list[Path]:
    """Draw the rows ``harness.measure.load.sweep`` returned; ``path``'s stem names the PDF and PNG."""
    colors = method_colors()
    methods = list(dict.fromkeys(row["method"] for row in rows if row["method"] != "ar"))
    with plt.rc_context(STYLE):
        figure, (speed, tokens, wasted) = plt.subplots(1, 3, figsize=(9.6, 2.4))
        for method in methods:
            mine = sorted((row for row in rows if row["method"] == method), key=lambda row: row["batch_size"])
            sizes = [row["batch_size"] for row in mine]
            style = {"color": colors.get("ar" if method == "ar_control" else method), "marker": "o", "markersize": 3,
                     "linestyle": ":" if method == "ar_control" else "-"}
            speed.plot(sizes, [row["speedup"] for row in mine], label=method, **style)
            tokens.plot(sizes, [row["target_tokens_per_step"] for row in mine], label=method, **style)
            if method != "ar_control":  # ar rejects nothing: no point on a log axis
                wasted.plot(sizes, [row["wasted_verify_share"] * row["target_tokens_per_step"] for row in mine],
                            label=method, **style)
        speed.axhline(1.0, color="black", linewidth=0.6)
        speed.set(xscale="log", xlabel="batch size B", ylabel="speedup over ar (paired)")
        tokens.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="verified tokens per step")
        wasted.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="verified tokens rejected per step")
        for axis in (speed, tokens, wasted):
            sizes = sorted({row["batch_size"] for row in rows})
            axis.set_xticks(sizes, [str(size) for size in sizes])
            axis.minorticks_off()
        figure.subplots_adjust(wspace=0.45)
        figure.legend(*speed.get_legend_handles_labels(), loc="center left", bbox_to_anchor=(0.9, 0.5), frameon=False)
        path.parent.mkdir(parents=True, exist_ok=True)
        return save_figure(figure, path.parent, path.stem)
