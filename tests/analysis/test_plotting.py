"""The shared palette, order and log ticks of every figure (``harness.analysis.plotting``)."""

from itertools import combinations

import pandas as pd
import pytest
from matplotlib.colors import to_hex

from harness.analysis.plotting import (
    FIXED_COLORS, MIN_COLOR_DISTANCE, color_distance, compact_number, lab, log_tick_values, log_ticks, method_colors,
    palette, plt, shade, variant_order, variant_styles,
)
from harness.catalog import catalog

PAIR_AND_BASELINES = ("lyanna", "eagle", "ar", "sd", "tree_sd")


def test_twenty_methods_get_twenty_distinct_colours():
    names = [*catalog(), "a_plugin_method"]  # the catalog's 19 and one without a colour
    assert len(names) == 20
    colours = palette(names)
    assert len({to_hex(colour) for colour in colours.values()}) == 20
    closest = min(color_distance(colours[a], colours[b]) for a, b in combinations(names, 2))
    assert closest >= MIN_COLOR_DISTANCE, closest


def test_the_pair_and_the_baselines_keep_their_fixed_strong_colours_everywhere():
    for name in PAIR_AND_BASELINES:
        assert to_hex(method_colors()[name]) == FIXED_COLORS[name]
        assert to_hex(palette([name])[name]) == FIXED_COLORS[name]  # alone or among others: the same colour
        assert to_hex(palette(["medusa", "a_plugin_method", name])[name]) == FIXED_COLORS[name]
        assert lab(FIXED_COLORS[name])[0] < 65  # strong: dark or saturated enough to read on white
    assert min(color_distance(FIXED_COLORS[a], FIXED_COLORS[b]) for a, b in combinations(PAIR_AND_BASELINES, 2)) > 40


def test_a_methods_variants_share_its_hue_family_but_never_look_alike():
    variants = ["eagle", "eagle_b12", "eagle_b24", "eagle_b48", "eagle_regen", "eagle_tv", "ar", "ar_control"]
    summary = pd.DataFrame({"variant": variants, "method": [v.split("_")[0] for v in variants]})
    styles = variant_styles(summary)
    eagle = [styles[v] for v in variants[:6]]
    assert to_hex(eagle[0].color) == FIXED_COLORS["eagle"]
    assert min(color_distance(a.color, b.color) for a, b in combinations(eagle, 2)) > 8
    assert len({style.marker for style in eagle}) == 6
    assert to_hex(styles["ar"].color) == FIXED_COLORS["ar"] and styles["ar_control"].color != styles["ar"].color
    for name, colour in method_colors().items():  # every method's first six shades stay apart, light or dark
        shades = [shade(colour, rank) for rank in range(6)]
        assert min(color_distance(a, b) for a, b in combinations(shades, 2)) > 8, name


def test_every_figure_orders_baselines_then_the_pair_then_the_rest():
    rows = [("dream", "dream"), ("lyanna_b24", "lyanna"), ("ar_control", "ar"), ("eagle", "eagle"),
            ("lyanna", "lyanna"), ("sd", "sd"), ("ar", "ar"), ("tree_sd", "tree_sd"), ("zz", "plugin")]
    summary = pd.DataFrame(rows, columns=["variant", "method"])
    assert variant_order(summary) == ["ar", "ar_control", "sd", "tree_sd", "eagle", "lyanna", "lyanna_b24", "dream",
                                      "zz"]


@pytest.mark.parametrize("positions, expected", [
    ([122880, 245760], ["123k", "150k", "200k", "246k"]),  # the real target's two rungs: round values between
    ([51200, 102400, 204800, 409600, 819200], ["51.2k", "102k", "205k", "410k", "819k"]),  # the zoo's ladder
    ([1e3, 1e7], ["1k", "10k", "100k", "1M", "10M"]),  # a wide range: decades
])
def test_log_axes_are_labelled_where_the_data_lie(positions, expected):
    assert [compact_number(value) for value in log_tick_values(positions)] == expected
    figure, axis = plt.subplots()
    axis.plot(positions, range(len(positions)))
    log_ticks(axis, positions)
    figure.canvas.draw()
    labels = [label.get_text() for label in axis.get_xticklabels() if label.get_text()]
    assert labels == expected and len(labels) > 2
    plt.close(figure)
