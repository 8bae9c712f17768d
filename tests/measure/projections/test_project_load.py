"""`python -m harness measure project-load`: the load study's acceptance over a GPU latency table, per batch size;
a batch whose tokens per step pass the table is left unprojected, not extrapolated."""

import math

import pandas as pd
import pytest

from harness.errors import DraftcountError
from harness.measure.projections.project_load import latencies_of, main, project_load

LATENCY = pd.DataFrame({
    "component": ["target"] * 3 + ["draft_lm"] * 2 + ["other", "target"],
    "tokens": [1, 8, 32, 1, 8, 10, 1],
    "ms": [10.0, 12.0, 20.0, 2.0, 3.0, 1.0, 99.0],
    "timing": ["cuda_graphs"] * 6 + ["eager"],
})


def load_rows() -> pd.DataFrame:
    return pd.DataFrame({"method": ["ar", "ar_control", "sd", "ar", "sd"], "batch_size": [1, 1, 1, 8, 8],
                         "target_tokens_per_step": [1.0, 1.0, 5.0, 8.0, 40.0], "tau": [1.0, 1.0, 2.0, 1.0, 2.0],
                         "speedup": [1.0, 0.99, 1.1, 1.0, 0.7], "catalog_method": ["ar", "ar", "sd", "ar", "sd"],
                         "options": ["{}", "{}", '{"gamma": 4}', "{}", '{"gamma": 4}']})


def test_the_speedup_is_tau_times_ars_step_over_the_methods():
    latencies = latencies_of(LATENCY, "cuda_graphs")
    assert latencies.target == {1: 0.010, 8: 0.012, 32: 0.020} and latencies.drafter_steps == {"other": 0.001}
    table = project_load(load_rows(), latencies, "basis").set_index(["method", "batch_size"])
    assert "ar_control" not in table.index.get_level_values(0)
    assert table.loc[("ar", 1), "projected_speedup"] == pytest.approx(1.0)
    sd = table.loc[("sd", 1)]
    assert sd.verify_ms == pytest.approx(10.0 + 2.0 * 4 / 7)  # target at 5 tokens: between 1 and 8
    assert sd.draft_ms > 0  # sd's cost model: gamma draft-LM forwards
    assert sd.projected_speedup == pytest.approx(2.0 * 10.0 / (sd.draft_ms + sd.verify_ms))
    assert math.isnan(table.loc[("sd", 8), "projected_speedup"])  # 40 tokens: past the table's 32
    assert "not projected" in table.loc[("sd", 8), "basis"] and table.loc[("ar", 8), "projected_speedup"] == 1.0


def test_the_command_writes_the_table_and_figure(tmp_path):
    LATENCY.to_csv(tmp_path / "latency.csv", index=False)
    load_rows().to_csv(tmp_path / "load.csv", index=False)
    arguments = ["--load", str(tmp_path / "load.csv"), "--latency", str(tmp_path / "latency.csv"), "--out-dir",
                 str(tmp_path / "out")]
    assert main(arguments) == 0
    assert len(pd.read_csv(tmp_path / "out" / "projection.csv")) == 4
    assert (tmp_path / "out" / "projection.png").stat().st_size > 1000
    with pytest.raises(DraftcountError, match="no 'static' rows"):
        main([*arguments, "--timing", "static"])


def test_the_figure_is_redrawn_from_a_written_projection(tmp_path):
    LATENCY.to_csv(tmp_path / "latency.csv", index=False)
    load_rows().to_csv(tmp_path / "load.csv", index=False)
    assert main(["--load", str(tmp_path / "load.csv"), "--latency", str(tmp_path / "latency.csv"), "--out-dir",
                 str(tmp_path / "out")]) == 0
    written = (tmp_path / "out" / "projection.csv").read_text()
    assert main(["--from-projection", str(tmp_path / "out" / "projection.csv"), "--load", str(tmp_path / "load.csv"),
                 "--out-dir", str(tmp_path / "again")]) == 0  # no latency table: nothing projected
    assert (tmp_path / "again" / "projection.png").stat().st_size > 1000
    assert not (tmp_path / "again" / "projection.csv").exists()  # the table is read, never rewritten
    assert (tmp_path / "out" / "projection.csv").read_text() == written
