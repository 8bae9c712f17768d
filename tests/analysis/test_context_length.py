"""Context-length view: tau and the paired speedup per long-context bucket, measured on each bucket's turns."""

import numpy as np
import pandas as pd

from harness.analysis.context_length import category_bucket, context_length_table, plot_context_length
from harness.analysis.view import Inputs


def turns_frame(buckets: dict[str, tuple[float, int]]) -> pd.DataFrame:
    """Two variants paired with ar (10 tokens/s): per category a known speed ratio and accept-length sum."""
    rows = []
    for variant, slowdown in (("owl", 1.0), ("eagle", 2.0)):
        for category, (ratio, accepted) in buckets.items():
            for prompt in range(2):
                pair = f"{category}{prompt}#0"
                common = {"run": f"r-{variant}", "dataset": "long_context", "temperature": 0.0, "category": category,
                          "prompt_id": f"{category}{prompt}", "pair_id": pair, "new_tokens": 20,
                          "verify_steps": 10, "phase_host": np.nan}
                rows.append({**common, "role": "baseline", "variant": variant, "method": variant,
                             "wall_seconds": 2.0, "accept_length_sum": 10})
                rows.append({**common, "role": "method", "variant": variant, "method": variant,
                             "wall_seconds": 2.0 / ratio * slowdown, "accept_length_sum": accepted // int(slowdown)})
    return pd.DataFrame(rows)


def test_buckets_are_read_from_categories():
    assert category_bucket("ctx512") == 512
    assert category_bucket("ctx") is None and category_bucket("stdlib_code") is None and category_bucket("") is None


def test_each_bucket_is_measured_on_its_own_turns():
    frame = turns_frame({"ctx512": (1.5, 30), "ctx128": (3.0, 40), "stdlib_code": (9.0, 90)})
    table = context_length_table(frame)
    owl = table[table.variant == "owl"].set_index("context_tokens")
    assert list(owl.index) == [128, 512]  # ascending; other categories left out
    assert owl.at[128, "tau"] == 4.0 and owl.at[512, "tau"] == 3.0
    assert abs(owl.at[128, "speedup_paired_mean"] - 3.0) < 1e-12 and owl.at[512, "turns"] == 2
    eagle = table[table.variant == "eagle"].set_index("context_tokens")
    assert eagle.at[128, "tau"] == 2.0 and abs(eagle.at[512, "speedup_paired_mean"] - 0.75) < 1e-12


def test_figure_draws_one_line_per_variant():
    table = context_length_table(turns_frame({"ctx512": (1.5, 30), "ctx128": (3.0, 40)}))
    summary = pd.DataFrame({"variant": ["owl", "eagle"], "method": ["owl", "eagle"]})
    figure = plot_context_length(Inputs(summary, main=["owl"], read={"context_length": table}))
    lines = figure.axes[0].get_lines()
    assert len(lines) == 2 and list(lines[0].get_xdata()) == [128, 512] and list(lines[0].get_ydata()) == [4.0, 3.0]
