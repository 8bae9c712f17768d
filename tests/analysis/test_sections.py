"""harness/analysis/sections.py: the studies report's drafter studies (issue 79, item 6): the learning curves, their
stability and the lr study, from the tables their rules write, and the learning-curve figure beside them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from harness.analysis.sections import calibrated_section, drafter_studies_section
from harness.analysis.view import Inputs
from harness.analysis.views import all_views
from harness.cli import main

RESULTS = Path(__file__).resolve().parents[2] / "results"


def write_metrics(folder: Path, agreement: dict[str, list[float]], tokens: dict[str, int]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, values in agreement.items():
        (folder / f"drafter-{name}.json").write_text(json.dumps(
            {"train": {"tokens": tokens[name], "flops": 6.0 * tokens[name]}, "heldout_top1_agreement_by_step": values}))
    return [str(folder / f"drafter-{name}.json") for name in agreement]


def test_the_studies_report_shows_the_curves_their_stability_the_lr_study_and_the_figure(tmp_path):
    """The tables as the learning-curves and lr-study commands write them: eagle records two draft steps, so every
    family's mean covers steps 1-2; the figure is linked where rule learning_curves drew it."""
    tables, figures = tmp_path / "studies" / "tables", tmp_path / "studies" / "figures"
    curves = {"eagle": [0.4, 0.3], "eagle_lc2": [0.5, 0.4], "dflash": [0.3, 0.2, 0.1], "dflash_lc2": [0.6, 0.5, 0.0]}
    paths = write_metrics(tmp_path / "metrics", curves, {"eagle": 1000, "eagle_lc2": 2000, "dflash": 1000,
                                                         "dflash_lc2": 2000})
    assert main(["learning-curves", "--metrics", *paths, "--rungs",
                 "eagle=eagle:1,eagle_lc2=eagle:2,dflash=dflash:1,dflash_lc2=dflash:2",
                 "--out", str(tables / "learning_curves.csv"), "--figure", str(figures / "learning_curves")]) == 0
    rates = write_metrics(tmp_path / "metrics", {"eagle_lr0003": [0.2, 0.1]}, {"eagle_lr0003": 1000})
    assert main(["lr-study", "--metrics", paths[0], *rates, "--rates", "eagle=eagle:0.001,eagle_lr0003=eagle:0.003",
                 "--out", str(tables / "lr.csv")]) == 0
    text = drafter_studies_section(Inputs(pd.DataFrame(), tables))
    assert "| dflash | 2x | 2,000 | 0.600 | 0.550 |" in text  # steps 1-2: (0.6 + 0.5) / 2, not (0.6 + 0.5 + 0) / 3
    assert "agreement, steps 1-2 (mean)" in text
    assert "| 1x -> 2x | 2 | -1.00 |" in text  # dflash below eagle at 1x, above it at 2x: the order reversed
    assert "| eagle | 0.001 (chosen) | 1,000 | 0.400 | 0.350 |" in text and "| eagle | 0.003 | 1,000 |" in text
    assert "![learning curves](figures/learning_curves.png)" in text
    (figures / "learning_curves.png").unlink()
    assert "![learning curves]" not in drafter_studies_section(Inputs(pd.DataFrame(), tables))
    assert drafter_studies_section(Inputs(pd.DataFrame(), tmp_path / "nothing")) == ""
    view = next(view for view in all_views() if view.name == "drafter_studies")
    assert view.markdown(Inputs(pd.DataFrame(), tables))[0] == "### Learning curves and learning rates"


def test_the_studies_report_shows_the_regime_each_rung_reaches_at_its_calibrated_shape(tmp_path):
    """The learning-curve table with each rung's calibrated runs (learning_curves.calibrated_columns' columns): the
    section lists only the rungs that ran so, with the shape, accepted drafts, tau and speedup per temperature."""
    tables = tmp_path / "tables"
    tables.mkdir()
    rows = [{"family": family, "drafter": name, "rung": rung, "tokens": 1000 * rung, "flops": 1.0,
             "agreement_step1": 0.3, "agreement_by_step": "[0.3, 0.2]"}
            for family in ("eagle", "dflash") for name, rung in ((f"{family}_lc05", 0.5), (family, 1.0))]
    curves = pd.DataFrame(rows)
    curves.loc[curves.family == "eagle", "calibrated_shape_t0"] = ["depth 1, budget 1, topk drafts",
                                                                   "depth 2, budget 4, topk drafts"]
    for column, values in {"calibrated_accepted_t0": [0.2, 0.7], "calibrated_tau_t0": [1.2, 1.7],
                           "calibrated_speedup_t0": [0.95, 1.05], "calibrated_speedup_t0_low": [0.9, 1.0],
                           "calibrated_speedup_t0_high": [1.0, 1.1]}.items():
        curves.loc[curves.family == "eagle", column] = values
    curves.to_csv(tables / "learning_curves.csv", index=False)
    text = drafter_studies_section(Inputs(pd.DataFrame(), tables))
    assert "**The regime each budget reaches.**" in text
    assert "| eagle | 1x | 1,000 | depth 2, budget 4, topk drafts | 0.70 | 1.70 | 1.05 [1.00, 1.10] |" in text
    assert "| eagle | 0.5x | 500 | depth 1, budget 1, topk drafts | 0.20 | 1.20 | 0.95 [0.90, 1.00] |" in text
    assert "dflash" not in calibrated_section(curves)  # its rungs ran no calibrated runs: not in that table
    assert "**The regime each budget reaches.**" not in drafter_studies_section(Inputs(
        pd.DataFrame(), write_table_without_calibrated(tables, curves)))


def write_table_without_calibrated(tables, curves):
    folder = tables.parent / "plain"
    folder.mkdir()
    curves.drop(columns=[column for column in curves if column.startswith("calibrated_")]).to_csv(
        folder / "learning_curves.csv", index=False)
    return folder


def test_the_committed_real_target_tables_render():
    """The real target's committed study tables (written before the mean covered shared steps): the curves' mean is
    recomputed from their steps, the lr table's old mean is labelled as such."""
    text = drafter_studies_section(Inputs(pd.DataFrame(), RESULTS / "smollm2" / "studies" / "tables"))
    assert "agreement, steps 1-2 (mean)" in text  # eagle's two steps, for every family
    assert "agreement, steps 1-3 (mean; steps differ)" in text and "0.003 (chosen)" in text
    assert "by agreement, step 1" in text


def test_the_dump_precision_study_shows_both_precisions_the_difference_and_the_sizes(tmp_path):
    """Rule dump_precision's table (as the measure command writes it) in the drafter studies' section."""
    from harness.measure.calibrations.dump_precision import FIELDS, table_rows
    from harness.store.atomic import write_csv

    def run(agreement, windows):
        return {"heldout_top1_agreement_by_step": agreement, "heldout_top1_agreement_by_window": windows,
                "train": {"steps": 200, "tokens": 409600, "seconds": 60.0}}

    runs = {"float32": run([0.6, 0.5], [[0.6, 0.5], [0.6, 0.5]]), "float16": run([0.61, 0.5], [[0.62, 0.5], [0.6, 0.5]])}
    tables = tmp_path / "tables"
    write_csv(tables / "dump_precision.csv", table_rows("eagle", runs, {"float32": (2**21, 2**11),
                                                                      "float16": (2**20, 2**11)}), FIELDS)
    text = drafter_studies_section(Inputs(pd.DataFrame(), tables))
    assert "**Feature dump precision.** eagle trained on a float32 feature dump" in text and "200 steps" in text
    assert "float32 2.0 MiB (1024 bytes a position x 2,048); float16 1.0 MiB (512 bytes a position x 2,048)" in text
    assert "| 1 | 0.600 | 0.610 | +0.010 [+0.000, +0.020] |" in text and "| 2 | 0.500 | 0.500 | +0.000 [+0.000, +0.000] |" in text
