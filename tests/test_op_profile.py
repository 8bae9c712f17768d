"""harness/op_profile.py: two runs profiled op by op and compared per generated token."""

import pandas as pd
import pytest
import torch

from harness.op_profile import ALL_OPS, OpCost, compare_per_token, format_rows, profile_ops, write_rows


def test_profile_counts_the_ops_a_run_calls():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    costs = profile_ops(lambda: [a @ b for _ in range(3)], torch.device("cpu"))
    assert costs["aten::mm"].calls == 3 and costs["aten::mm"].self_cpu_us > 0
    assert costs["aten::mm"].self_device_us == 0.0  # nothing ran on a device


def test_comparison_is_per_token_with_totals_first_and_largest_difference_next(tmp_path):
    ours = {"aten::mm": OpCost(20, 200.0, 0.0), "aten::alias": OpCost(40, 80.0, 0.0)}
    theirs = {"aten::mm": OpCost(20, 180.0, 0.0), "aten::eq": OpCost(10, 10.0, 5.0)}
    rows = compare_per_token(ours, theirs, ours_tokens=10, theirs_tokens=10)
    assert [row["op"] for row in rows] == [ALL_OPS, "aten::alias", "aten::mm", "aten::eq"]
    assert rows[0]["ours_calls"] == 6.0 and rows[0]["generate_calls"] == 3.0
    assert rows[0]["self_cpu_us_difference"] == pytest.approx(28.0 - 19.0)
    assert rows[1]["ours_self_cpu_us"] == 8.0 and rows[1]["generate_calls"] == 0.0
    assert rows[3]["generate_self_device_us"] == 0.5
    write_rows(rows, tmp_path / "ops.csv")
    table = pd.read_csv(tmp_path / "ops.csv")
    assert list(table.op) == [ALL_OPS, "aten::alias", "aten::mm", "aten::eq"]
    assert len(format_rows(rows, limit=1).splitlines()) == 3  # header, totals, the largest difference
    with pytest.raises(ValueError, match="generate tokens"):
        compare_per_token(ours, theirs, 0, 10)
