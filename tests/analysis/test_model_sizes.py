"""The models table's size and cost columns (``harness/analysis/model_sizes.py``, ``report.training_section``):
parameters by component for every model, polybasic counted as its runs count it (its mid LM and the draft LM), and
each drafter's FLOPs per draft token from its main variant's summary rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from harness.analysis.model_sizes import (
    chained_parameters,
    components_cell,
    flops_per_draft_cell,
    main_variant,
)
from harness.analysis.report import training_section


def write(tmp_path, name: str, metrics: dict):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(metrics))
    return path


def summary() -> pd.DataFrame:
    rows = [("eagle", "code", 0.0, 3e6), ("eagle", "chat", 0.0, 5e6), ("eagle", "code", 1.0, 2e6),
            ("lyanna", "code", 0.0, 6e6), ("sd", "code", 0.0, 1e6), ("polybasic", "code", 1.0, np.nan)]
    return pd.DataFrame(rows, columns=["variant", "dataset", "temperature", "drafter_flops_per_draft"])


def test_every_row_shows_its_components_and_its_flops_per_draft(tmp_path):
    paths = [write(tmp_path, "draft", {"parameters": 480, "parameter_components": {"embedding": 320, "backbone": 160},
                                       "training": {"steps": 3, "flops": 1e9}}),
             write(tmp_path, "drafter-eagle", {"trainable_parameters": 900, "parameter_components": {"backbone": 900},
                                               "train": {"steps": 2, "flops": 2e9}}),
             write(tmp_path, "drafter-lyanna", {"trainable_parameters": 1400,
                                                "parameter_components": {"backbone": 870, "injection": 530},
                                                "train": {"steps": 4, "flops": 3e9}}),
             write(tmp_path, "drafter-polybasic", {"method": "polybasic", "trainable_parameters": 2500,
                                                   "parameter_components": {"embedding": 500, "backbone": 2000},
                                                   "train": {"steps": 2, "flops": 4e9}})]
    table = training_section(paths, summary()).splitlines()
    assert "| parameters by component |" in table[0] and "| drafter MFLOPs per draft token (T = 0 / 1) |" in table[0]
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in table[2:]}
    assert rows["draft"][1:3] == ["480", "embedding 0.000M, backbone 0.000M"] and rows["draft"][-2] == "1 / -"
    assert rows["drafter-eagle"][-2] == "4 / 2"  # the mean over prompt sets at T = 0, then T = 1
    assert rows["drafter-lyanna"][2] == "backbone 0.001M, injection 0.001M" and rows["drafter-lyanna"][-2] == "6 / -"
    assert rows["drafter-polybasic"][1:3] == ["2980", "mid LM 0.003M, draft LM 0.000M"]  # as its runs count it
    assert rows["drafter-polybasic"][-2] == "-"  # it ran but drafted nothing
    assert training_section(paths).splitlines()[2].split(" | ")[-2] == "-"  # no runs: no FLOPs per draft


def test_components_and_variants():
    assert components_cell({"backbone": 3_871_872, "injection": 1_048_704}) == "backbone 3.872M, injection 1.049M"
    assert components_cell({}) == "-"  # metrics written before the count
    assert main_variant("drafter-eagle") == "eagle" and main_variant("draft") == "sd" and main_variant("target") is None
    mid = {"method": "polybasic", "trainable_parameters": 10, "parameter_components": {"backbone": 10}}
    assert chained_parameters(mid, None) == (10, {"backbone": 10})  # no draft LM in the table: its own count
    assert chained_parameters(mid, {"parameters": 5}) == (15, {"mid LM": 10, "draft LM": 5})
    assert flops_per_draft_cell(summary(), "missing") == "-" and flops_per_draft_cell(None, "eagle") == "-"
