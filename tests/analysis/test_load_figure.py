"""The load study's figure (``harness.analysis.load_figure``) drawn again from its written table, each variant in its
catalog method's fixed colour (a further size of a method in a shade of it, with a marker of its own)."""

import csv

from matplotlib.colors import to_hex

from harness.analysis.load_figure import line_style, read_load_rows, write_load_figure
from harness.analysis.plotting import FIXED_COLORS, palette


def test_the_figure_is_redrawn_from_the_table_in_the_methods_colours(tmp_path):
    table = tmp_path / "load.csv"
    fields = ["method", "batch_size", "speedup", "target_tokens_per_step", "wasted_verify_share", "tree_tokens",
              "catalog_method", "chosen", "predicted_shape"]
    rows = [{"method": method, "batch_size": size, "speedup": speedup / size, "target_tokens_per_step": tokens * size,
             "wasted_verify_share": 0.0 if family == "ar" else 0.5, "tree_tokens": tokens, "catalog_method": family,
             "chosen": str(method != "eagle_b12"), "predicted_shape": ""}
            for method, family, speedup, tokens in (("ar", "ar", 1.0, 1), ("ar_control", "ar", 1.0, 1),
                                                    ("eagle", "eagle", 1.3, 7), ("eagle_b12", "eagle", 1.2, 13))
            for size in (1, 2, 4)]
    with table.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        writer.writerows(rows)
    read = read_load_rows(table)
    assert read[0]["batch_size"] == 1 and read[-1]["tree_tokens"] == 13.0 and read[0]["chosen"] is True
    paths = write_load_figure(read, tmp_path / "figure" / "load.pdf")
    assert [path.suffix for path in paths] == [".pdf", ".png"] and paths[1].stat().st_size > 1000
    colours = palette(["ar", "eagle"])
    eagle, sized = line_style("eagle", "eagle", 0, colours), line_style("eagle_b12", "eagle", 1, colours)
    assert to_hex(eagle["color"]) == FIXED_COLORS["eagle"]
    assert sized["color"] != eagle["color"] and sized["marker"] != eagle["marker"]
