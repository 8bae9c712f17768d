"""`python -m harness measure load`: every method at every batch size on the same batches, `ar` paired with
itself (the A/A control), the table written as CSV; a budget: auto variant re-chooses its tree per B from the
latency per tokens in the batch; a batch size above the prompt count is a one-line error."""

import csv
import json

import numpy as np
import pytest

from harness.errors import DraftcountError
from harness.measure.projections.load import main, percentile
from harness.measure.calibrations.tree_shape import Calibration, choose_shape
from tests.helpers import make_llama, perturbed_copy, save_markov_target, train_test_drafter


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("load")
    target = make_llama(vocab=64, hidden=32, layers=2, heads=4, seed=0, init_range=0.3)
    target.save_pretrained(root / "target")
    perturbed_copy(target, noise=0.15, seed=1).save_pretrained(root / "draft")
    return root


def test_the_sweep_writes_every_method_at_every_batch_size(model_dirs, tmp_path):
    out = tmp_path / "load.csv"
    assert main(["--target", str(model_dirs / "target"), "--draft", str(model_dirs / "draft"), "--batch-sizes",
                 "1,3", "--requests", "6", "--prompt-len", "8", "--new-tokens", "6", "--threads", "1", "--out",
                 str(out), "--figure", str(tmp_path / "load.pdf"), "--no-progress"]) == 0
    assert (tmp_path / "load.pdf").stat().st_size > 1000 and (tmp_path / "load.png").is_file()
    rows = list(csv.DictReader(out.open()))
    assert [(row["method"], row["batch_size"]) for row in rows] == [
        (method, size) for size in ("1", "3") for method in ("ar", "ar_control", "sd", "tree_sd")]
    for row in rows:
        assert float(row["tokens_per_s"]) > 0 and float(row["e2e_p50"]) <= float(row["e2e_p99"])
        assert float(row["verify_seconds"]) > 0 and 0 < float(row["share_of_bound"]) < 1  # no drafter, no host time
        # the wall time's split: verify forwards, drafting, the rest
        shares = [float(row[name]) for name in ("share_of_bound", "draft_share", "other_share")]
        assert all(0 <= share < 1 for share in shares) and abs(sum(shares) - 1) < 1e-9
        if row["method"] == "ar":
            assert float(row["speedup"]) == 1.0 and float(row["tau"]) == 1.0
        if row["method"] in ("sd", "tree_sd"):
            assert float(row["tau"]) > 1.0 and float(row["draft_share"]) > 0.05  # a draft forward per level
            shares = [float(share) for share in row["accepted_by_position"].split("/")]
            assert shares == sorted(shares, reverse=True) and shares[0] > 0  # a deeper position only after its parent
            # tau: 1 + the accepted drafts per step, less what the last steps accepted past max_new_tokens
            assert float(row["tau"]) <= 1 + sum(shares) + 0.01  # a perturbed copy: drafts are accepted
    wasted = {(row["method"], row["batch_size"]): float(row["wasted_verify_share"]) for row in rows}
    assert wasted[("ar", "1")] == 0.0 and 0 < wasted[("tree_sd", "3")] < 1  # ar keeps every verified token
    verified = {(row["method"], row["batch_size"]): float(row["target_tokens_per_step"]) for row in rows}
    assert verified[("ar", "1")] == 1.0 and verified[("ar", "3")] == 3.0  # one token per row and step
    assert 5.0 < verified[("sd", "3")] <= 3 * 5.0  # gamma 4: root and four drafts per live row (rows finish apart)


def test_variants_replace_the_built_in_methods_and_must_decode_batches(model_dirs, tmp_path):
    out = tmp_path / "load.csv"
    variants = ['{"name": "sd_g1", "method": "sd", "options": {"gamma": 1}}',
                '{"name": "sd_g3", "method": "sd", "options": {"gamma": 3}}']
    assert main(["--target", str(model_dirs / "target"), "--draft", str(model_dirs / "draft"),
                 *(item for variant in variants for item in ("--variant", variant)), "--batch-sizes", "1,2",
                 "--requests", "2", "--prompt-len", "8", "--new-tokens", "6", "--threads", "1", "--out", str(out),
                 "--figure", str(tmp_path / "load.pdf"), "--no-progress"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [row["method"] for row in rows] == ["ar", "ar_control", "sd_g1", "sd_g3"] * 2
    assert {(row["method"], row["catalog_method"], row["options"]) for row in rows if row["method"] == "sd_g3"} == {
        ("sd_g3", "sd", '{"gamma": 3}')}  # what measure project-load reads
    for row in rows:  # a row's tree: the root and gamma drafts (fewer at the end, where max_new_tokens cuts it)
        gamma = {"sd_g1": 1, "sd_g3": 3}.get(row["method"], 0)
        assert 1 <= float(row["tree_tokens"]) <= gamma + 1
    for size in ("1", "2"):  # one chosen sd size per B: the faster of the two
        sd = [row for row in rows if row["batch_size"] == size and row["catalog_method"] == "sd"]
        chosen = [row for row in sd if row["chosen"] == "True"]
        assert len(chosen) == 1 and float(chosen[0]["speedup"]) == max(float(row["speedup"]) for row in sd)
    with pytest.raises(DraftcountError, match="pld.* decodes one request at a time"):
        main(["--target", str(model_dirs / "target"), "--variant", '{"name": "pld", "method": "pld"}',
              "--batch-sizes", "1", "--requests", "1", "--no-progress"])


def test_a_shape_file_variant_takes_the_tree_predicted_for_each_batch_size(tmp_path):
    save_markov_target(tmp_path, layers=2)
    train_test_drafter("eagle", tmp_path, "eagle", steps=0)
    table = [[1.0] * 8, [1.0, 1.5, 1.8, 2.0, 2.1, 2.2, 2.3, 2.4], [1.0, 1.6, 2.0, 2.6, 2.7, 2.8, 2.9, 3.0]]
    flat = {"1": 0.01, "16": 0.01}
    costs = Calibration(steps=10, drafter_seconds=0.01, rest_seconds=0.01)  # 1 ms a step each
    shape = {"top_k": 2, **choose_shape(np.array(table), flat, costs)}
    (tmp_path / "shape.json").write_text(json.dumps(shape))
    # the file chose its shape where 9 tokens cost what 1 does; here every token of a row costs a whole step
    steep = {"1": 0.01, "2": 0.02, "4": 0.04, "16": 0.16}
    latency = {"target_by_batch": {"1": steep, "2": steep}}
    (tmp_path / "latency-batch.json").write_text(json.dumps(latency))
    variant = {"name": "eagle", "method": "eagle", "drafter": str(tmp_path / "eagle"),
               "options": {"top_k": 2, "shape_file": str(tmp_path / "shape.json")}}
    out = tmp_path / "load.csv"
    assert main(["--target", str(tmp_path / "target"), "--variant", json.dumps(variant), "--batch-latency",
                 str(tmp_path / "latency-batch.json"), "--batch-sizes", "1,2", "--requests", "2", "--prompt-len", "8",
                 "--new-tokens", "6", "--threads", "1", "--out", str(out), "--no-progress"]) == 0
    rows = {(row["method"], row["batch_size"]): row for row in csv.DictReader(out.open())}
    one, two = (json.loads(rows[("eagle", size)]["options"]) for size in ("1", "2"))
    assert (one["depth"], one["budget"]) == (shape["depth"], shape["budget"]) == (3, 7)  # B = 1: the file's own
    assert "shape_file" not in one  # choice (budget 8's estimate is within 3% of 7's: the smaller wins)
    assert two["budget"] < one["budget"] and rows[("eagle", "2")]["predicted_shape"] == \
        f"depth {two['depth']}, budget {two['budget']}"
    assert float(rows[("eagle", "2")]["tree_tokens"]) <= two["budget"] + 1 and rows[("ar", "2")]["predicted_shape"] == ""
    with pytest.raises(DraftcountError, match="batch latency has no batch size 4"):
        main(["--target", str(tmp_path / "target"), "--variant", json.dumps(variant), "--batch-latency",
              str(tmp_path / "latency-batch.json"), "--batch-sizes", "4", "--requests", "4", "--no-progress"])


def test_a_batch_larger_than_the_prompts_is_refused(model_dirs):
    with pytest.raises(DraftcountError, match="batch size 8 is larger than the 4 prompts"):
        main(["--target", str(model_dirs / "target"), "--draft", str(model_dirs / "draft"), "--batch-sizes", "8",
              "--requests", "4", "--no-progress"])


def test_percentile_is_nearest_rank():
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0 and percentile([1.0, 2.0], 0.99) == 2.0
