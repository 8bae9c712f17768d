"""budget: auto: accepted length by depth and budget from one calibration run's ranks, the shape chosen from it, and
the same choice redone per batch size from the latency per tokens in the batch."""

import json

import numpy as np
import pytest

from harness.errors import DraftcountError
from harness.measure.calibrations.tree_shape import (
    Calibration, accepted_table, choose_shape, latency_at, path_ranks, pool_depths, shape_for_batch, smallest_near_best,
)
from harness.trees.beam_shape import BeamShape
from methods.eagle import EagleOptions
from methods.lyanna import LyannaOptions
from methods.owl import OwlOptions
from methods.prism import PrismOptions


def test_pool_depths_follow_the_beam_pool_order():
    assert pool_depths(2, 3).tolist() == [1, 1, 2, 2, 2, 2, 3, 3, 3, 3]


def test_ranks_and_accepted_length_by_depth_and_budget():
    depths = pool_depths(2, 3)
    scores = np.array([-0.1, -1.0, -0.3, -2.0, -1.1, -1.2, -0.5, -3.0, -3.1, -3.2])
    path = [0, 2, 6]  # depth 1, 2, 3: the best node of each depth
    ranks = path_ranks(scores, depths, path, 3)
    assert ranks[:, 0].tolist()[0] == 0 and ranks[1, 0] > 100 and ranks[2, 1] > 100  # deeper than D: never in
    assert ranks[:, 2].tolist() == [0, 1, 2]  # among all 10: -0.1, -0.3, -0.5 rank first
    assert ranks[:, 1].tolist()[:2] == [0, 1]
    table = accepted_table([ranks], max_depth=3, max_budget=4)
    assert table[2].tolist() == [1, 2, 3, 3]  # depth 3: budget 1 holds the first node, 3 hold the whole path
    assert table[0].tolist() == [1, 1, 1, 1]  # depth 1: one accepted node at most
    assert table[1].tolist() == [1, 2, 2, 2]


def test_the_chosen_shape_trades_acceptance_against_latency():
    table = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.5, 1.8, 2.0], [1.0, 1.6, 2.0, 2.6]])
    calibration = Calibration(steps=10, drafter_seconds=0.3, rest_seconds=0.1)  # 30 ms per step at depth 3
    flat = choose_shape(table, {"1": 0.1, "8": 0.1}, calibration)  # verifying 5 tokens costs what 1 does
    assert (flat["depth"], flat["budget"]) == (3, 4)
    steep = choose_shape(table, {"1": 0.01, "5": 0.2}, calibration)  # bigger trees cost far more
    assert steep["budget"] < 4 and steep["estimated_speedup"] == pytest.approx(
        steep["estimated_tokens_per_s"] * 0.02)


def test_the_shape_per_batch_size_follows_the_latency_per_tokens_in_the_batch():
    table = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.5, 1.8, 2.0], [1.0, 1.6, 2.0, 2.6]])
    calibration = Calibration(steps=10, drafter_seconds=0.3, rest_seconds=0.1)
    one = {"1": 0.1, "8": 0.1}  # B = 1: 5 tokens cost what 1 does
    assert choose_shape(table, one, calibration, rows=1) == choose_shape(table, one, calibration)
    shape = {"depth": 3, "budget": 4, **choose_shape(table, one, calibration)}
    assert (shape_for_batch(shape, one, 1)["depth"], shape_for_batch(shape, one, 1)["budget"]) == (3, 4)
    eight = {"1": 0.1, "2": 0.16, "3": 0.4, "5": 1.0}  # B = 8: the batch's tokens fill the machine
    chosen = shape_for_batch(shape, eight, 8)

    def estimate(depth, budget):  # B rows of (1 + accepted) tokens over the batch's step time
        seconds = latency_at(eight, budget + 1) + 8 * (0.03 * depth / 3 + 0.01)
        return 8 * (1 + table[depth - 1, budget - 1]) / seconds

    best = max(((depth, budget) for depth in (1, 2, 3) for budget in (1, 2, 3, 4)), key=lambda shape: estimate(*shape))
    assert (chosen["depth"], chosen["budget"]) == best and best[1] < 4
    assert chosen["estimated_tokens_per_s"] == pytest.approx(estimate(*best), rel=1e-4)
    with pytest.raises(DraftcountError, match="measures sizes up to 2; .* need 5"):
        shape_for_batch(shape, {"1": 0.1, "2": 0.2}, 2)
    with pytest.raises(DraftcountError, match="not a tree-shape file"):
        shape_for_batch({"depth": 3}, one, 2)


def test_methods_read_the_measured_shape(tmp_path):
    shape = tmp_path / "shape.json"
    shape.write_text(json.dumps({"depth": 3, "budget": 9, "top_k": 4}))
    eagle = EagleOptions(top_k=4, shape_file=str(shape))
    assert (eagle.depth, eagle.budget) == (5, 24)  # the options never rewrite themselves ...
    assert eagle.shape() == BeamShape(4, 3, 9)  # ... the shape is resolved once, when the adapter is built
    for options in (LyannaOptions, PrismOptions, OwlOptions):  # every beam drafter reads it the same way
        assert options(shape_file=str(shape)).shape().budget == 9
    with pytest.raises(DraftcountError, match="top_k=4, not 2"):
        EagleOptions(top_k=2, shape_file=str(shape)).shape()
    with pytest.raises(DraftcountError, match="no tree-shape file"):
        EagleOptions(shape_file=str(tmp_path / "missing.json")).shape()


def test_a_tie_within_the_noise_keeps_the_smaller_shape_and_latency_is_made_monotone():
    """A flat optimum (estimates within 3% of the best) chooses its smallest tree, fewest nodes then shallowest, so
    a busy machine's noisier latencies do not move the choice; a larger size measured faster than a smaller one
    counts as the smaller one's cost."""
    estimates = np.array([[1.00, 1.50, 1.90], [1.00, 1.95, 1.98], [1.00, 1.60, 2.00]])
    assert smallest_near_best(estimates) == (1, 1)  # 1.95 is within 3% of 2.00: depth 2, budget 2
    assert smallest_near_best(estimates, tolerance=0.0) == (2, 2)
    assert latency_at({"1": 0.05, "8": 0.12, "16": 0.11, "32": 0.14}, 16) == 0.12
    assert latency_at({"1": 0.05, "8": 0.12, "16": 0.11, "32": 0.14}, 12) == 0.12


def test_a_choice_at_the_largest_shape_calibrated_is_a_warning_in_its_file(tmp_path, capsys):
    """A shape at the calibration's largest depth or budget may be beaten by one never measured: the file says so."""
    from argparse import Namespace

    from harness.measure.calibrations.calibration import largest_reached, write_choice

    assert largest_reached({"depth": 3, "budget": 7}, {"depth": 6, "budget": 24}) == []
    assert largest_reached({"depth": 6, "budget": 24}, {"depth": 6, "budget": 24}) == ["depth", "budget"]
    args = Namespace(method="eagle", temperature=0.0, prompts="p.jsonl", repeats=3, latency="l.json",
                     out=tmp_path / "shape.json")
    chosen = {"depth": 6, "budget": 9, "accepted_per_step": 2.0, "estimated_tokens_per_s": 10.0,
              "estimated_speedup": 1.5}
    write_choice(args, {"top_k": 4}, chosen, Calibration(steps=5), {"max_depth": 6}, "depth 6, budget 9",
                 {"depth": 6, "budget": 24})
    assert json.loads((tmp_path / "shape.json").read_text())["at_largest"] == ["depth"]
    assert "chose the largest depth calibrated" in capsys.readouterr().err


def test_the_drafting_convention_comes_from_the_options_or_the_shape_file(tmp_path):
    """drafts: auto takes the shape file's convention (a file without one: topk, as before issue 79); an explicit
    option wins; the options column (as_run) shows what ran."""
    shape = tmp_path / "shape.json"
    shape.write_text(json.dumps({"depth": 2, "budget": 3, "top_k": 4, "drafts": "sampled"}))
    assert EagleOptions(shape_file=str(shape)).shape() == BeamShape(4, 2, 3, "sampled")
    assert EagleOptions(shape_file=str(shape)).as_run().drafts == "sampled"
    assert EagleOptions(shape_file=str(shape), drafts="topk").shape().drafts == "topk"
    assert EagleOptions().shape().drafts == "topk" and LyannaOptions(drafts="sampled").shape().drafts == "sampled"
    shape.write_text(json.dumps({"depth": 2, "budget": 3, "top_k": 4, "drafts": "greedy"}))
    with pytest.raises(DraftcountError, match="chose drafts 'greedy'"):
        EagleOptions(shape_file=str(shape)).shape()


def test_the_calibration_chooses_the_faster_convention_at_t_above_zero():
    from harness.measure.calibrations.tree_shape import conventions, faster_convention

    assert conventions("both", "auto", 0.0) == ["topk"]  # greedy: one convention
    assert conventions("both", "auto", 1.0) == ["topk", "sampled"]
    assert conventions(None, "sampled", 1.0) == ["sampled"] and conventions(None, "auto", 1.0) == ["topk"]
    assert faster_convention({"topk": {"estimated_tokens_per_s": 10.0},
                              "sampled": {"estimated_tokens_per_s": 12.0}}) == "sampled"
    assert faster_convention({"topk": {"estimated_tokens_per_s": 9.8},  # within the tie tolerance: top-k stays
                              "sampled": {"estimated_tokens_per_s": 10.0}}) == "topk"
