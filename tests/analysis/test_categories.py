"""Per-category results: Spec-Bench's tasks (MT-Bench's categories as one), each measured on its own turns."""

import numpy as np
import pandas as pd

from harness.analysis.categories import category_sections, category_table, plot_categories, task_names
from harness.analysis.view import Inputs


def turns_frame(categories: dict[str, float], turns_per_prompt: int = 2) -> pd.DataFrame:
    """A method paired with ar: every category's prompts run at a known speed ratio (ar: 10 tokens/s)."""
    rows = []
    for index, (category, ratio) in enumerate(categories.items()):
        for prompt in range(2):
            for turn in range(turns_per_prompt):
                pair = f"{category}{prompt}#{turn}"
                common = {"run": "r", "dataset": "spec_bench", "temperature": 0.0, "category": category,
                          "prompt_id": f"{category}{prompt}", "pair_id": pair, "new_tokens": 20,
                          "verify_steps": 10, "phase_host": np.nan}
                rows.append({**common, "role": "baseline", "variant": "eagle", "method": "eagle",
                             "wall_seconds": 2.0, "accept_length_sum": 10})
                rows.append({**common, "role": "method", "variant": "eagle", "method": "eagle",
                             "wall_seconds": 2.0 / ratio, "accept_length_sum": 10 * (1 + index % 3)})
    return pd.DataFrame(rows)


def test_spec_bench_tasks_group_mt_bench_categories():
    categories = pd.Series(["writing", "coding", "translation", "rag", "writing"])
    assert list(task_names(categories)) == ["mt_bench", "mt_bench", "translation", "rag", "mt_bench"]
    mt_bench_alone = pd.Series(["writing", "coding", "math"])
    assert list(task_names(mt_bench_alone)) == ["writing", "coding", "math"]  # its own categories


def test_each_category_is_measured_on_its_own_turns():
    frame = turns_frame({"writing": 2.0, "coding": 2.0, "translation": 1.5, "qa": 3.0})
    table = category_table(frame).set_index("category")
    assert list(table.index) == ["mt_bench", "translation", "qa", "overall"]
    assert abs(table.at["mt_bench", "speedup_paired_mean"] - 2.0) < 1e-12 and table.at["mt_bench", "turns"] == 8
    assert abs(table.at["translation", "speedup_paired_mean"] - 1.5) < 1e-12
    assert abs(table.at["qa", "speedup_paired_mean"] - 3.0) < 1e-12
    assert table.at["overall", "turns"] == 16 and table.at["overall", "prompts"] == 8
    # tau: accept-length sum over verification steps; writing 1, coding 2 (-> mt_bench 1.5), translation 3, qa 1
    assert table.at["mt_bench", "tau"] == 1.5 and table.at["translation", "tau"] == 3.0
    assert table.at["qa", "tau"] == 1.0
    expected = np.exp(np.mean(np.log([2.0] * 8 + [1.5] * 4 + [3.0] * 4)))
    assert abs(table.at["overall", "speedup_paired_mean"] - expected) < 1e-12


def test_single_category_sets_have_no_rows_and_the_views_render():
    assert category_table(turns_frame({"code": 2.0})).empty
    table = category_table(turns_frame({"writing": 2.0, "translation": 1.5}))
    text = category_sections(table, ["eagle"])
    assert "| variant | mt_bench | translation | overall |" in text and "| eagle | 2.00x (1.00) | 1.50x (2.00) |" in text
    summary = pd.DataFrame({"variant": ["eagle"], "method": ["eagle"]})
    figure = plot_categories(Inputs(summary, main=["eagle"], read={"categories": table}))
    cells = figure.axes[0].images[0].get_array()  # a heat map: one row per variant, one cell per category
    assert cells.shape == (1, 3) and abs(cells[0, 1] - 1.5) < 1e-12  # overall included; translation's speedup
    assert [text.get_text() for text in figure.axes[0].texts] == ["2.00", "1.50", f"{cells[0, 2]:.2f}"]
