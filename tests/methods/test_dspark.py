"""`dspark`: DeepSpec's layout against a restatement of its heads, the planner, the temperatures' fit, and
losslessness when the planned verify length varies from step to step (the conformance suite runs the default:
a flat cost, the whole block)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness import SamplingConfig, generate, wrap_model
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from methods.dspark.adapter import latency_at, plan_length, read_latency_table
from methods.dspark.checkpoint import load_dspark
from methods.dspark.training import calibration_error
from tests.helpers import chi_square_pvalue, exact_distribution, make_llama, sampled_distribution
from tests.methods.dflash_reference import dflash_forward, dspark_slots, official_config, official_dspark
from tests.methods.test_dflash import write_official

VOCAB, WIDTH, DEPTH, RANK = 40, 32, 4, 6


@pytest.fixture(scope="module")
def target():
    return make_llama(vocab=VOCAB, hidden=WIDTH, layers=DEPTH, heads=4, seed=3, init_range=0.3)


@pytest.fixture(scope="module")
def released(tmp_path_factory, target) -> tuple[Path, dict, dict]:
    config = official_config(WIDTH, 4, 2, 2, 5, VOCAB, [-1, 2], 7, DEPTH)
    fields, weights = official_dspark(config, RANK, 0, target.get_input_embeddings().weight.detach(),
                                      target.get_output_embeddings().weight.detach())
    return write_official(tmp_path_factory.mktemp("dspark") / "deepspec", fields, weights), config, weights


@torch.no_grad()
def test_heads_match_deepspecs_layout(target, released):
    directory, config, weights = released
    drafter = load_dspark(directory, target)
    assert drafter.features.layers == (0, 3)  # target layer -1: the embedding output
    states = torch.randn(6, 2 * WIDTH, generator=torch.Generator().manual_seed(1))
    block = target.get_input_embeddings().weight[torch.tensor([3, 7, 7, 7, 7])].detach()
    hidden = drafter(drafter.context([states[None, :, :WIDTH], states[None, :, WIDTH:]]), block[None],
                     torch.arange(11)[None])[0]
    expected = dflash_forward(weights, config, states, block, torch.arange(6), torch.arange(6, 11))
    assert torch.allclose(hidden, expected, atol=1e-5, rtol=1e-5)
    assert drafter.draft_rows(hidden).shape[0] == 5  # DeepSpec: every slot drafts
    previous = torch.tensor([3, 11, 12, 13, 14])
    base = target.get_output_embeddings()(hidden)
    logits, raw = drafter.slot(hidden, base, previous)
    want_logits, want_confidence = dspark_slots(weights, hidden, base, previous)
    assert torch.allclose(logits, want_logits, atol=1e-5, rtol=1e-5)
    assert torch.allclose(drafter.confidence(raw, slice(0, 5)), want_confidence, atol=1e-6)


def test_a_markov_head_this_project_does_not_build_is_refused(tmp_path, target, released):
    _, config, weights = released
    fields = json.loads((released[0] / "config.json").read_text())
    fields["markov_head_type"] = "rnn"
    with pytest.raises(DraftcountError, match="markov_head_type 'rnn' is not built here"):
        load_dspark(write_official(tmp_path / "rnn", fields, weights), target)


def test_the_planner_keeps_the_prefix_that_maximises_tokens_per_second():
    survival = [0.9, 0.8, 0.5, 0.1]
    assert plan_length(survival, [1.0] * 5, 0.0) == 4  # a flat cost: everything that may survive
    assert plan_length(survival, [1.0, 1.1, 1.2, 1.6, 3.0], 0.0) == 2  # 2.7/1.2 > 3.2/1.6: stop at the first fall
    assert plan_length(survival, [1.0] * 5, 0.6) == 2  # the threshold stops it too
    assert plan_length([0.01], [1.0, 1.5], 0.0) == 0


def test_latency_tables_are_read_and_interpolated(tmp_path):
    path = tmp_path / "latency.json"
    path.write_text(json.dumps({"target": {"1": 0.01, "4": 0.02}}))
    table = read_latency_table(str(path))
    assert latency_at(table, 2) == pytest.approx(0.01 + 0.01 / 3) and latency_at(table, 8) == 0.02
    with pytest.raises(DraftcountError, match="not a latency measurement"):
        read_latency_table(str(tmp_path / "missing.json"))


def test_calibration_error_is_zero_when_predictions_match():
    predicted = torch.tensor([0.1, 0.1, 0.9, 0.9])
    assert calibration_error(predicted, predicted) == pytest.approx(0.0)
    assert calibration_error(predicted, torch.tensor([0.0, 0.2, 1.0, 0.8])) == pytest.approx(0.0)
    assert calibration_error(torch.tensor([0.9]), torch.tensor([0.0])) == pytest.approx(0.9)


@pytest.fixture(scope="module")
def steep_latency(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("latency") / "latency.json"
    path.write_text(json.dumps({"target": {"1": 1.0, "2": 1.2, "3": 1.5, "4": 1.9, "6": 3.0}}))
    return str(path)


def test_varying_verify_lengths_stay_greedy_lossless(target, released, steep_latency):
    model = wrap_model(target)
    ar, _ = build_adapter("ar", {}, BuildInputs(model, None, None))
    adapter, _ = build_adapter("dspark", {"latency_file": steep_latency, "threshold": "0.2"},
                               BuildInputs(model, None, released[0]))
    lengths = set()
    for seed in range(4):
        prompt = torch.randint(VOCAB, (1, 6), generator=torch.Generator().manual_seed(seed))
        expected = generate(model, ar, prompt, 24, SamplingConfig()).output_ids
        result = generate(model, adapter, prompt, 24, SamplingConfig())
        assert result.output_ids == expected
        lengths.add(result.counters.drafted_tokens / max(1, result.counters.drafter.forwards))
    assert len(lengths) > 1  # the planner chose different lengths: the test exercises the cut


def test_varying_verify_lengths_keep_the_target_distribution(tmp_path):
    """On 6 tokens (sharp random models, as in the conformance suite), with the block cut by the threshold."""
    target = make_llama(vocab=6, hidden=16, layers=2, heads=2, seed=0, init_range=1.0)
    config = official_config(16, 2, 1, 1, 3, 6, [0, 1], 5, 2)
    fields, weights = official_dspark(config, 3, 4, target.get_input_embeddings().weight.detach(),
                                      target.get_output_embeddings().weight.detach())
    fields["confidence_temperatures"] = [1.0, 0.5, 2.0]
    directory = write_official(tmp_path / "small", fields, weights)
    model = wrap_model(target)
    adapter, _ = build_adapter("dspark", {"threshold": "0.3"}, BuildInputs(model, None, directory))
    sampling = SamplingConfig(1.0)
    counts = sampled_distribution(model, adapter, [1, 2, 3], 3, sampling, 1500, seed=0)
    assert chi_square_pvalue(counts, exact_distribution(model, [1, 2, 3], 3, sampling)) > 1e-3
