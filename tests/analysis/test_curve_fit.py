"""The learning curves' fitted lines (``harness/analysis/curve_fit.py``, issue 80 item 3): agreement against log2
positions per family with a 95% t interval on the slope, and where lyanna's line would meet eagle's, read from the
table the learning-curves command writes (``learning_curves_fit.csv``) and the studies report's section."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis.curve_fit import fit_line, t_quantile
from harness.analysis.sections import drafter_studies_section
from harness.analysis.view import Inputs
from harness.cli import main

POSITIONS = {0.25: 122_880, 0.5: 245_760, 1.0: 491_520}


def write_curves(folder: Path, families: dict[str, list[list[float]]]) -> Path:
    """Each family's held-out agreement by draft step at rungs 0.25, 0.5 and 1 (the real target's), written as
    training metrics and run through the learning-curves command; the fitted lines' table it wrote."""
    paths, rungs = [], []
    for family, by_rung in families.items():
        for rung, agreement in zip(POSITIONS, by_rung):
            name = family if rung == 1 else f"{family}_lc{rung:g}".replace(".", "")
            path = folder / "metrics" / f"drafter-{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"train": {"tokens": POSITIONS[rung]},
                                        "heldout_top1_agreement_by_step": agreement}))
            paths.append(str(path))
            rungs.append(f"{name}={family}:{rung:g}")
    out = folder / "tables" / "learning_curves.csv"
    assert main(["learning-curves", "--metrics", *paths, "--rungs", ",".join(rungs), "--out", str(out)]) == 0
    return out.with_name("learning_curves_fit.csv")


def test_a_line_is_fitted_by_least_squares_with_a_t_interval():
    positions = np.array([1000, 2000, 4000, 8000])
    exact = fit_line(positions, 0.1 + 0.05 * np.log2(positions))
    assert exact["slope"] == pytest.approx(0.05) and exact["r2"] == pytest.approx(1.0)
    assert exact["low"] == pytest.approx(0.05) and exact["high"] == pytest.approx(0.05)  # no residual, no width
    noisy = fit_line(positions, np.array([0.60, 0.66, 0.69, 0.76]))  # x = 9.97-12.97, centred: -1.5, -0.5, 0.5, 1.5
    slope = (-1.5 * 0.60 - 0.5 * 0.66 + 0.5 * 0.69 + 1.5 * 0.76) / 5.0
    residuals = np.array([0.60, 0.66, 0.69, 0.76]) - (0.6775 + slope * np.array([-1.5, -0.5, 0.5, 1.5]))
    half = 4.303 * math.sqrt((residuals**2).sum() / 2 / 5.0)
    assert noisy["slope"] == pytest.approx(slope) and noisy["low"] == pytest.approx(slope - half)
    assert math.isnan(fit_line(positions[:2], np.array([0.1, 0.2]))["low"])  # two rungs: a slope, no interval
    assert t_quantile(2) == 4.303 and t_quantile(30) == pytest.approx(2.042, abs=0.002)


def test_the_written_table_says_where_lyanna_meets_eagle(tmp_path):
    """lyanna 0.05 below eagle at the largest rung and gaining 0.025 a doubling on it: the lines meet two doublings
    on, at 4x the largest rung's 491,520 positions."""
    fits = pd.read_csv(write_curves(tmp_path, {
        "eagle": [[0.40, 0.30], [0.45, 0.35], [0.50, 0.40]],
        "lyanna": [[0.30, 0.20], [0.375, 0.275], [0.45, 0.35]]}))
    step1 = fits[fits.metric == "agreement_step1"].set_index("family")
    assert step1.loc["eagle", "slope_per_doubling"] == pytest.approx(0.05)
    assert step1.loc["lyanna", "slope_per_doubling"] == pytest.approx(0.075)
    assert step1.loc["lyanna", "meets_positions"] == pytest.approx(4 * 491_520)
    assert step1.loc["lyanna", "meeting"].startswith("meets at 1,966,080 positions (4.0x")
    assert step1.loc["lyanna", "meets"] == "eagle" and pd.isna(step1.loc["eagle", "meets"])
    mean = fits[fits.metric == "agreement_mean"].set_index("family")
    assert list(mean.steps) == [2, 2] and mean.loc["lyanna", "meets_positions"] == pytest.approx(4 * 491_520)
    assert step1.loc["eagle", "rungs"] == 3 and step1.loc["eagle", "positions_max"] == 491_520


@pytest.mark.parametrize(("lyanna", "words"), [
    ([[0.30], [0.33], [0.36]], "lines diverge"),  # below eagle and gaining less a doubling: never meets
    ([[0.10], [0.151], [0.202]], "does not meet within 100x"),  # gains 0.001 a doubling on a 0.298 gap
    ([[0.50], [0.55], [0.60]], "already ahead"),
])
def test_lines_that_never_cross_say_so(tmp_path, lyanna, words):
    fits = pd.read_csv(write_curves(tmp_path, {"eagle": [[0.40], [0.45], [0.50]], "lyanna": lyanna}))
    row = fits[(fits.family == "lyanna") & (fits.metric == "agreement_step1")].iloc[0]
    assert row.meeting == words and pd.isna(row.meets_positions)


def test_the_studies_report_shows_the_fitted_lines(tmp_path):
    write_curves(tmp_path, {"eagle": [[0.40, 0.30], [0.45, 0.35], [0.50, 0.40]],
                            "lyanna": [[0.30, 0.25], [0.33, 0.28], [0.36, 0.31]]})
    text = drafter_studies_section(Inputs(pd.DataFrame(), tmp_path / "tables"))
    assert "**Fitted lines.**" in text
    assert "| eagle | step 1 | +0.050 [+0.050, +0.050] | 1.00 | 3 | 122,880-491,520 | - |" in text
    assert "| lyanna | step 1 | +0.030 [+0.030, +0.030] | 1.00 | 3 | 122,880-491,520 | lines diverge (eagle) |" in text
    assert "| lyanna | mean, steps 1-2 |" in text
