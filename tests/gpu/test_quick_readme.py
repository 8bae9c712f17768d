"""The quick check's README: the engine-efficiency section from whatever table the stage wrote."""

import pandas as pd

from harness.gpu.quick_readme import STAGES, efficiency_section, stage_rows


def test_the_efficiency_section_shows_the_table_as_far_as_it_got(tmp_path):
    assert efficiency_section(tmp_path) == "Not finished."
    (tmp_path / "checks").mkdir()
    pd.DataFrame([{"variant": "eagle_tree", "method": "eagle", "tau": 4.0, "tau_measured": 4.0,
                   "verified_per_step": 60.0, "draft_ms": 2.5, "verify_ms": 9.0, "measured_speedup": 2.1,
                   "predicted_speedup": 2.6, "efficiency": 0.81, "identical": "4/4", "shape": "llama-3.1-8b / 1",
                   "dtype": "bfloat16", "timing": "cuda_graphs"}]).to_csv(tmp_path / "checks" / "engine_efficiency.csv")
    text = efficiency_section(tmp_path)
    assert text.startswith("llama-3.1-8b / 1, bfloat16, cuda_graphs.")
    assert "| eagle_tree | 4 | 4 | 60 | 2.5 | 9 | 2.1 | 2.6 | 0.81 | 4/4 |" in text
    rows = {row[0]: row for row in stage_rows(tmp_path, 0.0)}
    assert rows["engine efficiency"][2] == "1" and [stage.name for stage in STAGES].index("engine efficiency") == 5
