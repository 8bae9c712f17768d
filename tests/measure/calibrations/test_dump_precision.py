"""``python -m harness measure dump-precision``: one family trained on a float32 feature dump and on its float16
copy, end to end on a tiny Markov target, and the pure parts (the rounded copy, the rows, the checks)."""

import csv
import json

import numpy as np
import pytest
import torch

from harness.backend.models import load_model
from harness.cli import main as cli
from harness.data.token_streams import load_tokens
from harness.errors import DraftcountError
from harness.measure.calibrations.dump_precision import FIELDS, disk_bytes, rounded_copy, same_training, table_rows
from harness.store.files import load_weights
from harness.training.drafter_contract import AGREEMENT, AGREEMENT_BY_WINDOW
from harness.training.features import dump_features
from tests.helpers import save_markov_target


@pytest.fixture(scope="module")
def markov_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("dump-precision")
    save_markov_target(root)
    return root


def arguments(root, out, work=None):
    return ["measure", "dump-precision", "--target", str(root / "target"), "--tokens", str(root / "tokens.pt"),
            "--heldout", str(root / "tokens.pt"), "--steps", "3", "--sequences", "12", "--seq-len", "16",
            "--shard-size", "5", "--opt", "seq_len=16", "--opt", "batch_size=4", "--opt", "lr=3e-3",
            "--resamples", "200", "--no-progress", "--out", str(out), *(["--work-dir", str(work)] if work else [])]


def test_both_precisions_train_the_same_steps_and_the_table_has_its_columns(markov_root, tmp_path):
    out, work = tmp_path / "dump_precision.csv", tmp_path / "work"
    assert cli(arguments(markov_root, out, work)) == 0
    with out.open() as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == FIELDS
        rows = list(reader)
    assert [(row["precision"], row["step"]) for row in rows] == [
        ("float32", "1"), ("float32", "2"), ("float16", "1"), ("float16", "2")]  # eagle: 2 draft steps
    assert {row["train_steps"] for row in rows} == {"3"} and len({row["train_tokens"] for row in rows}) == 1
    assert {row["family"] for row in rows} == {"eagle"} and {row["heldout_windows"] for row in rows} == {"16"}
    assert {row["positions"] for row in rows} == {str(12 * 16)}
    size = {row["precision"]: int(row["dump_bytes"]) for row in rows}
    assert 0.45 < size["float16"] / size["float32"] < 0.6  # 48 wide, 'last' only: 2 + 4/48 bytes against 4 + 4/48
    for row in rows:
        if row["precision"] == "float16":
            low, diff, high = (float(row[key]) for key in ("diff_ci_low", "diff_vs_float32", "diff_ci_high"))
            assert low <= high and -1 <= diff <= 1
        else:
            assert row["diff_vs_float32"] == row["diff_ci_low"] == ""
    # the per-window agreements (what the interval resamples) average to the drafter kit's figure
    metrics = json.loads((work / "train-float32" / "metrics.json").read_text())["metrics"]
    assert np.allclose(np.mean(metrics[AGREEMENT_BY_WINDOW], axis=0), metrics[AGREEMENT])
    # a rerun reads the finished trainings back: the same table
    again = tmp_path / "again.csv"
    assert cli(arguments(markov_root, again, work)) == 0
    assert again.read_text() == out.read_text()


def one_line_error(argv, capsys) -> str:
    assert cli(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    return lines[0]


def test_a_work_dir_of_another_check_stops_in_one_line(markov_root, tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "settings.json").write_text(json.dumps({"sequences": 1}))
    assert "another dump-precision check" in one_line_error(arguments(markov_root, tmp_path / "out.csv", work), capsys)


@pytest.mark.parametrize("extra,message", [(["--steps", "0"], "--steps and --budget-tokens"),
                                           (["--seq-len", "1"], "--seq-len >= 2"),
                                           (["--heldout", "none.pt"], "none.pt does not exist"),
                                           (["--family", "pld"], "has no trained drafter"),
                                           (["--layers", ",,"], "names no feature layer")])
def test_bad_arguments_are_one_line(markov_root, tmp_path, capsys, extra, message):
    assert message in one_line_error([*arguments(markov_root, tmp_path / "out.csv"), *extra], capsys)


def test_the_rounded_copy_keeps_the_ids_and_rounds_the_features(markov_root, tmp_path):
    target = load_model(str(markov_root / "target"), with_tokenizer=False).model
    index = dump_features(target, load_tokens(markov_root / "tokens.pt"), tmp_path / "f32", sequences=6, seq_len=12,
                          layers=["last", 1], shard_size=4, dtype="float32", seed=0)
    copy = rounded_copy(tmp_path / "f32", tmp_path / "f16", "float16", progress=False)
    assert copy["dtype"] == "float16" and copy["shards"] == index["shards"]
    assert copy["bytes"] == 6 * 12 * (48 * 2 * 2 + 4) and index["bytes"] == 6 * 12 * (48 * 2 * 4 + 4)
    for name in index["shards"]:
        full, half = load_weights(tmp_path / "f32" / name), load_weights(tmp_path / "f16" / name)
        assert torch.equal(full["input_ids"], half["input_ids"])
        assert half["last"].dtype == torch.float16 and torch.equal(half["last"], full["last"].half())
    assert disk_bytes(tmp_path / "f16") < disk_bytes(tmp_path / "f32")


def run(agreement, windows=None, steps=10, tokens=640):
    metrics = {AGREEMENT: agreement, "train": {"steps": steps, "tokens": tokens, "seconds": 1.5}}
    return {**metrics, AGREEMENT_BY_WINDOW: windows} if windows is not None else metrics


def test_rows_give_the_difference_and_its_paired_interval():
    windows32 = [[0.5, 0.2], [0.7, 0.4]]
    windows16 = [[0.6, 0.2], [0.8, 0.4]]  # every window 0.1 better at step 1, equal at step 2
    rows = table_rows("eagle", {"float32": run([0.6, 0.3], windows32), "float16": run([0.7, 0.3], windows16)},
                      {"float32": (4000, 100), "float16": (2000, 100)}, resamples=100)
    assert [row["bytes_per_position"] for row in rows] == [40.0, 40.0, 20.0, 20.0]
    assert rows[2]["diff_vs_float32"] == pytest.approx(0.1) and rows[3]["diff_vs_float32"] == 0
    assert (rows[2]["diff_ci_low"], rows[2]["diff_ci_high"]) == pytest.approx((0.1, 0.1))
    assert (rows[3]["diff_ci_low"], rows[3]["diff_ci_high"]) == (0, 0)
    assert "diff_vs_float32" not in rows[0] and rows[0]["heldout_windows"] == 2
    plain = table_rows("pard", {"float32": run([0.6]), "float16": run([0.5])}, {"float32": (8, 1), "float16": (4, 1)})
    assert plain[1]["diff_vs_float32"] == pytest.approx(-0.1) and "diff_ci_low" not in plain[1]


def test_trainings_of_different_lengths_are_not_compared():
    same_training({"float32": run([0.5]), "float16": run([0.5])})
    with pytest.raises(DraftcountError, match="float16 drafter trained 9 steps"):
        same_training({"float32": run([0.5]), "float16": run([0.5], steps=9)})


def test_the_workflow_rule_trains_the_family_as_its_drafters_entry_does():
    from harness.workflow_jobs import dump_precision_arguments

    config = {"dump_precision": {"family": "eagle"}, "bench": {},
              "features": {"layers": ["last", 2, 14], "sequences": 1600, "seq_len": 256, "shard_size": 64, "seed": 0},
              "drafters": {"eagle": {"budget_tokens": 409600, "options": {"lr": 0.01, "batch_size": 8}},
                           "eagle_regen": {"method": "eagle", "data": "regenerate", "steps": 200}}}
    argv = dump_precision_arguments(config, "t", "train.pt", "heldout.pt", "work/dump_precision")
    assert " ".join(argv) == ("--target t --tokens train.pt --heldout heldout.pt --family eagle --budget-tokens 409600 "
                              "--opt lr=0.01 --opt batch_size=8 --sequences 1600 --seq-len 256 --layers last,2,14 "
                              "--shard-size 64 --seed 0 --device cpu --work-dir work/dump_precision")
    config["dump_precision"] = {"family": "eagle_regen", "sequences": 64}
    with pytest.raises(DraftcountError, match="not a `drafters` entry trained on the feature dump"):
        dump_precision_arguments(config, "t", "train.pt", "heldout.pt", "w")
