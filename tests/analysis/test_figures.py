"""The views' figures (``harness.analysis.figures``, ``figures_more``) are readable: no text overlaps another however
many variants a report holds, every variant is a labelled row in the fixed order and its method's colour, and the
acceptance-by-depth figure hides rates measured on fewer than MIN_STEPS steps while showing every count."""

from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from harness.analysis.figures import plot_phases, plot_speedup, plot_tau, plot_waste, primary_variants
from harness.analysis.figures_more import MIN_STEPS, depth_cells, depth_texts, plot_depth, plot_efficiency
from harness.analysis.plotting import FIXED_COLORS, STYLE, plt, variant_order
from harness.analysis.view import Inputs
from harness.catalog import catalog

EXTRA = ["eagle_b24", "eagle_regen", "lyanna_b24", "lyanna_reuse_states", "owl_long", "suffix_path_edits"]


def summary_table(variants: list[str], datasets=("humaneval", "stdlib_code"), temperatures=(0.0, 1.0)) -> pd.DataFrame:
    """A summary with every column the figures read, one row per variant x dataset x temperature."""
    generator = np.random.default_rng(0)
    rows = []
    for variant in variants:
        method = next((name for name in catalog() if variant == name or variant.startswith(f"{name}_")), variant)
        method = "ar" if variant == "ar_control" else method
        for dataset in datasets:
            for temperature in temperatures:
                speedup = float(generator.uniform(0.4, 1.8))
                rows.append({
                    "variant": variant, "method": method, "dataset": dataset, "temperature": temperature, "turns": 10,
                    "diverged_turns": 0, "speedup_paired_mean": speedup, "speedup_ci_low": speedup - 0.1,
                    "speedup_ci_high": speedup + 0.1, "speedup_bound": speedup + 0.2, "tau": speedup * 1.5,
                    "accepted_per_step": speedup * 0.5, "tokens_per_forward": speedup * 1.6,
                    "drafter_parameters": 0 if method == "ar" else 1000, "drafter_forwards_per_step": 2.0,
                    **{f"phase_{phase}_per_token": 0.002 for phase in ("prefill", "target", "drafter", "verify", "host")},
                    **{f"{part}_flops_per_token": 1e7 for part in ("drafter_useful", "drafter_wasted", "verify_useful",
                                                                 "verify_wasted")}})
    return pd.DataFrame(rows)


def drawn_texts(figure: plt.Figure) -> list[plt.Text]:
    """The figure's visible, non-empty texts as drawn: titles, labels, legends, cell texts, and the tick labels of
    ticks inside their axis's view (matplotlib keeps labels of ticks past the limits, undrawn)."""
    figure.canvas.draw()
    ticks, shown = set(), []
    for axes in figure.axes:
        for axis, (low, high) in ((axes.xaxis, sorted(axes.get_xlim())), (axes.yaxis, sorted(axes.get_ylim()))):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks.update({id(tick.label1), id(tick.label2)})
                if low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    shown += [label for label in (tick.label1, tick.label2) if label.get_visible()]
    others = [text for text in figure.findobj(plt.Text) if id(text) not in ticks and text.get_visible()]
    return [text for text in shown + others if text.get_text().strip()]


def text_overlaps(figure: plt.Figure) -> list[tuple[str, str]]:
    """Every pair of drawn texts whose boxes (trimmed by a hair) intersect."""
    renderer = figure.canvas.get_renderer()
    boxes = [(text.get_text(), text.get_window_extent(renderer).shrunk(0.96, 0.9)) for text in drawn_texts(figure)]
    return [(a, b) for (a, box_a), (b, box_b) in combinations(boxes, 2) if box_a.overlaps(box_b)]


@pytest.fixture(autouse=True)
def paper_style():
    with plt.rc_context(STYLE):
        yield
    plt.close("all")


@pytest.mark.parametrize("draw", [plot_speedup, plot_tau, plot_phases, plot_waste, plot_efficiency])
def test_no_text_overlaps_with_many_variants(draw):
    variants = ["ar", "ar_control", *catalog(), *EXTRA]
    data = Inputs(summary_table(variants), main=variants)
    figure = draw(data)
    assert text_overlaps(figure) == []
    labels = [label.get_text() for label in figure.axes[0].get_yticklabels()]
    shown = primary_variants(data.summary, variants) if draw is plot_speedup else variant_order(data.summary)
    assert labels == shown  # one labelled row per variant, in the fixed order


def test_the_speedup_bars_are_in_their_methods_fixed_colours():
    variants = ["ar", "ar_control", *catalog()]
    figure = plot_speedup(Inputs(summary_table(variants), main=variants))
    colours = {to_hex(patch.get_facecolor()) for patch in figure.axes[0].patches}
    assert {FIXED_COLORS[name] for name in ("sd", "tree_sd", "eagle", "lyanna")} <= colours
    assert len(figure.axes[0].patches) == 2 * 19  # 18 methods and the control, two datasets each


def depth_table(counts: dict[str, list[int]], accepted_share: float = 0.5) -> pd.DataFrame:
    rows = []
    for variant, reached in counts.items():
        for depth, steps in enumerate(reached, start=1):
            rows.append({"variant": variant, "method": variant, "dataset": "humaneval", "temperature": 0.0,
                         "depth": depth, "reached": steps, "accepted": round(steps * accepted_share),
                         "rate": accepted_share})
    return pd.DataFrame(rows)


def test_depth_cells_under_the_minimum_show_their_count_only():
    table = depth_table({"eagle": [400, 120, 19, 3], "sd": [300, MIN_STEPS]})
    rates, counts = depth_cells(table, ["sd", "eagle"], 0.0)
    assert list(rates.index) == ["sd", "eagle"] and counts.at["eagle", 3] == 19
    texts, hidden = depth_texts(rates, counts)
    assert texts.at["eagle", 1] == "0.50\n400" and texts.at["sd", 2] == "0.50\n20"  # 20 steps: shown
    assert texts.at["eagle", 3] == "n=19" and bool(hidden.at["eagle", 3]) and not hidden.at["sd", 2]


def test_the_depth_figure_hides_rates_from_few_steps_and_drops_depths_nobody_reached():
    summary = summary_table(["eagle", "sd"], datasets=("humaneval",), temperatures=(0.0,))
    table = depth_table({"eagle": [400, 120, 19, 3, 2], "sd": [300, 25, 30]}, accepted_share=1.0)
    figure = plot_depth(Inputs(summary, main=["eagle", "sd"], read={"depth_acceptance": table}))
    axis = figure.axes[0]
    cells = axis.images[0].get_array()
    assert cells.shape == (2, 3)  # depths 4-5 hold fewer than MIN_STEPS steps everywhere: left out
    assert bool(np.ma.getmaskarray(cells)[1, 2]) and not np.ma.getmaskarray(cells)[0, 2]  # eagle (row 2) at depth 3: 19
    texts = [text.get_text() for text in axis.texts]
    assert "1.00\n120" in texts and "1.00\n30" in texts and "n=19" in texts and "1.00\n19" not in texts
    assert "depths 4-5" in figure.get_suptitle()
    assert text_overlaps(figure) == []


def test_a_depth_table_without_counts_is_drawn_and_says_so():
    summary = summary_table(["eagle"], datasets=("humaneval",), temperatures=(0.0,))
    table = depth_table({"eagle": [400, 3]}).drop(columns=["reached", "accepted"])
    figure = plot_depth(Inputs(summary, main=["eagle"], read={"depth_acceptance": table}))
    assert not np.ma.getmaskarray(figure.axes[0].images[0].get_array()).any()  # nothing to hide it by
    assert "no step counts" in figure.get_suptitle()


def test_the_real_targets_committed_figures_have_no_overlapping_text():
    """Every figure of results/smollm2 (20 variants, three datasets, MT-Bench's categories) drawn from its committed
    tables, with the main variants rule `figure` gives it."""
    from pathlib import Path

    from harness.analysis.view import read_inputs
    from harness.analysis.views import all_views

    tables = Path(__file__).resolve().parents[2] / "results" / "smollm2" / "tables"
    if not (tables / "summary.csv").is_file():
        pytest.skip("no committed results/smollm2 tables")
    main = ["ar", "ar_control", "sd", "tree_sd", "eagle", "lyanna", "pld", "suffix", "stand", "reader", "hedgespec",
            "prism", "owl", "polybasic", "dflash", "medusa", "mtp", "pard", "dspark", "dream"]
    data = read_inputs(tables, main)
    drawn = [view for view in all_views() if view.figure and view.with_data(data)]
    assert {"speedup", "depth", "categories"} <= {view.name for view in drawn}
    for view in drawn:
        figure = view.draw(data)
        assert text_overlaps(figure) == [], view.name
        plt.close(figure)
