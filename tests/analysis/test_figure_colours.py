"""The README's main figure: each method's main variant and the A/A control, in distinct catalog colours."""

import pandas as pd

from harness.analysis.figures import primary_variants
from harness.analysis.plotting import method_colors, variant_colors
from harness.catalog import catalog


def test_catalog_colours_are_unique():
    colours = [item.color.lower() for item in catalog().values()]
    assert all(colours) and len(set(colours)) == len(colours)


def test_the_speedup_figure_shows_one_variant_per_method_in_its_own_colour():
    rows = [("ar", "ar"), ("ar_control", "ar"), ("eagle", "eagle"), ("eagle_b24", "eagle"), ("eagle_tv", "eagle"),
            ("lyanna", "lyanna"), ("howl", "owl"), ("owl", "owl"), ("sd", "sd")]
    summary = pd.DataFrame([{"variant": variant, "method": method} for variant, method in rows])
    main = [variant for variant, _ in rows]
    chosen = primary_variants(summary, main)
    assert chosen == ["ar_control", "sd", "eagle", "lyanna", "owl"]
    colours = variant_colors(summary)
    shown = [colours[variant] for variant in chosen if variant != "ar_control"]
    assert len(set(shown)) == len(shown)
    assert set(method_colors()) == set(catalog())
