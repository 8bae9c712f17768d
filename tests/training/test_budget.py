"""A drafter's training budget in supervised target positions: the kit derives its steps (``budgeted``), the CLI
takes ``--budget-tokens`` instead of ``--steps``, and the trained drafter's metrics count the positions it saw."""

from __future__ import annotations

import json

import pytest
import torch

from harness.cli import main
from harness.data.token_streams import save_tokens
from harness.training.drafters import DrafterLoopOptions, DrafterTrainRequest, budgeted, tokens_per_step


def request(budget: int) -> DrafterTrainRequest:
    return DrafterTrainRequest(method="eagle", target="t", data=None, out=None, steps=7, budget_tokens=budget)


def test_the_steps_follow_from_the_budget_and_each_steps_positions():
    options = DrafterLoopOptions(batch_size=4, seq_len=64)
    assert tokens_per_step(options) == 256 and tokens_per_step(DrafterLoopOptions(batch_size=2, grad_accum=3)) == 1536
    assert budgeted(request(0), options).steps == 7  # no budget: the steps as given
    assert budgeted(request(2560), options).steps == 10 and budgeted(request(2561), options).steps == 11
    # windows of 64 take four times the steps of windows of 256 for the same positions
    assert budgeted(request(122_880), options).steps == 4 * budgeted(request(122_880),
                                                                     DrafterLoopOptions(batch_size=4)).steps


def test_the_cli_trains_to_a_budget_and_counts_its_positions(tmp_path, model_dirs):
    tokens = tmp_path / "tokens.pt"
    save_tokens(tokens, torch.randint(0, 200, (4000,), generator=torch.Generator(device="cpu").manual_seed(0)))
    metrics = tmp_path / "metrics.json"
    common = ["train", "--target", str(model_dirs["target"]), "--data", str(tokens), "--no-progress",
              "--opt", "batch_size=2", "--opt", "seq_len=32"]
    for method in ("eagle", "owl"):
        assert main([*common, "--method", method, "--out", str(tmp_path / method), "--budget-tokens", "200",
                     "--metrics", str(metrics)]) == 0
        train = json.loads(metrics.read_text())["train"]
        assert train["steps"] == 4 and train["tokens"] == 256  # ceil(200 / 64) steps of 2 x 32 positions


def test_steps_and_a_budget_together_are_one_line_error(tmp_path, model_dirs, capsys):
    assert main(["train", "--method", "eagle", "--target", str(model_dirs["target"]), "--data", str(tmp_path),
                 "--out", str(tmp_path / "out"), "--steps", "3", "--budget-tokens", "100"]) == 2
    assert capsys.readouterr().err.strip().endswith("give --steps or --budget-tokens, not both")


@pytest.mark.parametrize("budget", ["0", "-5"])
def test_a_budget_below_one_is_refused(tmp_path, model_dirs, capsys, budget):
    assert main(["train", "--method", "eagle", "--target", str(model_dirs["target"]), "--data", str(tmp_path),
                 "--out", str(tmp_path / "out"), "--budget-tokens", budget]) == 2
    assert f"--budget-tokens must be >= 1, got {budget}" in capsys.readouterr().err
