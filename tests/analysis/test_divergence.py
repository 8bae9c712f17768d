"""The greedy divergence table: first differing token per pair, counts per variant and dtype, the lossless gate."""

import json

import pytest

from harness.cli import main
from harness.analysis.divergence import divergence_table, first_divergence
from harness.store.records import SCHEMA_VERSION


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # one stopped early (EOS): they part at its end


def _pair(handle, variant, prompt, ours, theirs, dtype="bfloat16", temperature=0.0):
    for role, output in (("method", ours), ("baseline", theirs)):
        handle.write(json.dumps({
            "schema_version": SCHEMA_VERSION, "variant": variant if role == "method" else "ar", "role": role,
            "pair_id": f"{prompt}#0", "dataset": "code", "dtype": dtype, "sampling": {"temperature": temperature},
            "output_ids": output}) + "\n")


def test_table_and_lossless_gate(tmp_path, capsys):
    path = tmp_path / "eagle.jsonl"
    with path.open("w") as handle:
        _pair(handle, "eagle", "a", [1, 2, 3, 4], [1, 2, 3, 4])
        _pair(handle, "eagle", "b", [1, 2, 9, 4], [1, 2, 3, 4])
        _pair(handle, "eagle", "c", [7, 2, 3, 4], [1, 2, 3, 4])
        _pair(handle, "eagle", "d", [7, 7], [1, 2], temperature=1.0)  # sampled pairs are not compared
        _pair(handle, "eagle", "e", [5, 6], [5, 6], dtype="float32")
    table = divergence_table([path]).set_index("dtype")
    assert table.loc["bfloat16", "pairs"] == 3 and table.loc["bfloat16", "diverged"] == 2
    assert table.loc["bfloat16", "first_divergence_min"] == 0
    assert table.loc["bfloat16", "first_divergence_median"] == 1
    assert table.loc["float32", "diverged"] == 0
    assert main(["divergence", str(path), "--out", str(tmp_path / "d.csv")]) == 0
    assert (tmp_path / "d.csv").is_file()
    assert main(["divergence", str(path), "--expect-identical"]) == 2
    assert "2 greedy outputs differ" in capsys.readouterr().err


def test_no_paired_greedy_records_is_an_error(tmp_path):
    path = tmp_path / "ar.jsonl"
    with path.open("w") as handle:
        _pair(handle, "sd", "a", [1], [1], temperature=1.0)
    with pytest.raises(Exception, match="no greedy records paired"):
        divergence_table([path])
