"""gamma: auto / k: auto: accepted drafts by chain length from one calibration run at the longest chain, the length
chosen from it by the tree shape's rule, and the choice a busy machine makes (the same as the idle one's)."""

import copy
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from harness.backend.device import interleaved_median_seconds
from harness.backend.models import load_model
from harness.errors import DraftcountError
from harness.measure.calibrations import chain_length
from harness.measure.calibrations.chain_length import accepted_by_length, choose_length, drafter_forwards
from harness.measure.calibrations.latency import target_latencies
from harness.measure.calibrations.tree_shape import Calibration, anchored_latency
from harness.trees.chain_shape import chain_field, chain_methods
from methods.pard import PardOptions
from methods.sd import SpeculativeDecodingOptions
from tests.helpers import make_llama, save_model_dir
from tests.methods.dflash_reference import official_config, official_dflash


def test_a_shorter_chain_accepts_the_prefix_of_the_longest():
    assert accepted_by_length([0, 1, 4, 2], 4).tolist() == [0.75, 1.25, 1.5, 1.75]  # min(a, L) per step
    assert accepted_by_length([], 3).tolist() == [0, 0, 0]
    assert drafter_forwards(1, 8, 8.0) == 1 and drafter_forwards(4, 8, 8.0) == 4  # sd: a forward per draft
    assert drafter_forwards(4, 8, 1.0) == 1  # pard: one forward whatever the length


def test_the_chosen_length_trades_acceptance_against_latency():
    accepted = np.array([0.9, 1.7, 2.4, 3.0])  # a good drafter
    calibration = Calibration(steps=10, drafter_seconds=0.04, rest_seconds=0.01)  # 4 ms a step, 1 ms a forward
    flat = choose_length(accepted, {"1": 0.1, "8": 0.1}, calibration, forwards_at_max=4.0)
    assert flat["length"] == 4  # verifying 5 tokens costs what 1 does: the longest chain
    steep = choose_length(accepted, {"1": 0.01, "5": 0.2}, calibration, forwards_at_max=4.0)
    assert steep["length"] < 4 and steep["estimated_speedup"] == pytest.approx(
        steep["estimated_tokens_per_s"] * (0.01 + 0.001))
    tie = choose_length(np.array([1.0, 1.02]), {"1": 0.1, "3": 0.1}, Calibration(steps=1), forwards_at_max=1.0)
    assert tie["length"] == 1  # within 3% of the best: the shorter chain


def test_the_per_step_costs_are_medians_over_prompts_and_anchor_the_latency_curve():
    costs = Calibration(prompt_costs=[(10, 0.1, 0.01, 0.2, 40), (10, 0.1, 0.01, 0.2, 40),
                                      (10, 5.0, 3.0, 9.0, 40)]).per_step()  # one prompt in a busy spell
    assert (costs.drafter, costs.rest, costs.target, costs.verified_tokens) == pytest.approx((0.01, 0.001, 0.02, 4))
    old = Calibration(steps=4, drafter_seconds=0.4, rest_seconds=0.2).per_step()  # a shape file's: no target time
    assert (old.drafter, old.rest, old.target) == pytest.approx((0.1, 0.05, 0.0))
    latency = {"1": 0.004, "4": 0.01, "8": 0.02}  # measured apart, on a quieter machine than the run
    assert anchored_latency(latency, costs) == pytest.approx({"1": 0.008, "4": 0.02, "8": 0.04})  # 0.02 at 4 tokens
    assert anchored_latency(latency, old) == latency


def test_chain_options_read_the_measured_length(tmp_path):
    assert set(chain_methods()) == {"sd", "pard", "dflash"} and chain_field("sd") == "gamma"
    assert chain_field("pard") == "k" and chain_field("dflash") == "verify_length"
    length = tmp_path / "length.json"
    length.write_text(json.dumps({"field": "gamma", "length": 2}))
    options = SpeculativeDecodingOptions(length_file=str(length))
    assert options.gamma == 4 and options.as_run().gamma == 2  # resolved when the adapter is built
    with pytest.raises(DraftcountError, match="chose option 'gamma', not 'k'"):
        PardOptions(length_file=str(length)).as_run()
    with pytest.raises(DraftcountError, match="no chain-length file"):
        SpeculativeDecodingOptions(length_file=str(tmp_path / "missing.json")).as_run()


def test_latencies_are_timed_in_turns():
    calls = []
    runs = {size: (lambda size=size: calls.append(size)) for size in (1, 2, 3)}
    times = interleaved_median_seconds(runs, torch.device("cpu"), repeats=2, warmup=1)
    assert set(times) == {1, 2, 3} and calls == [1, 2, 3] + [1, 2, 3] * 2  # warmups, then one of each per round


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory, tokenizer):
    """A target of 4 layers whose last 3 barely move the residual stream, and its first layer alone as the draft
    LM: a draft a quarter of the target's cost that agrees often but not always, as a real pair does."""
    root = tmp_path_factory.mktemp("pair")
    target = make_llama(vocab=len(tokenizer), hidden=64, layers=4, heads=4, seed=10, init_range=0.3, context=1024)
    with torch.no_grad():
        for layer in target.model.layers[1:]:
            layer.self_attn.o_proj.weight.mul_(0.1)
            layer.mlp.down_proj.weight.mul_(0.1)
    draft = copy.deepcopy(target)
    draft.model.layers = draft.model.layers[:1]
    draft.config.num_hidden_layers = 1
    draft.config.layer_types = draft.config.layer_types[:1] if getattr(draft.config, "layer_types", None) else None
    return {"target": save_model_dir(root / "target", target, tokenizer),
            "draft": save_model_dir(root / "draft", draft, tokenizer)}


def calibrate(model_dirs, tmp_path, name: str, method: list[str] | None = None, repeats: int = 3) -> dict:
    """The whole choice as the workflow makes it: the target's latency per size (rule measure_latency's
    measurement), then `measure chain-length` (``method``: its arguments; sd's by default) on calibration prompts."""
    target = load_model(str(model_dirs["target"]), "float32", "cpu")
    latency = target_latencies(target.model, 32, [1, 2, 3, 4, 5, 6, 8], repeats=5 * repeats)
    latency_file = tmp_path / f"latency-{name}.json"
    latency_file.write_text(json.dumps({"target": {str(size): seconds for size, seconds in latency.items()}}))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": index, "category": "code", "turns": [text]}) + "\n"
                               for index, text in enumerate(["def add(a, b):", "class Point:", "import os\n",
                                                             "for i in range(10):"])))
    out = tmp_path / f"length-{name}.json"
    method = method or ["--method", "sd", "--draft", str(model_dirs["draft"])]
    chain_length.main([*method, "--target", str(model_dirs["target"]), "--prompts", str(prompts),
                       "--latency", str(latency_file), "--max-length", "6", "--max-new-tokens", "32",
                       "--repeats", str(repeats), "--threads", "1", "--no-progress", "--out", str(out)])
    return json.loads(out.read_text())


def test_dflash_estimates_no_chain_longer_than_its_block_drafts(pair_dirs, tmp_path, tokenizer):
    """A dflash block of 4 drafts 3: `--max-length 6` estimates verify lengths 1-3 only (a longer one cannot run)."""
    vocab = len(tokenizer)
    drafter = tmp_path / "dflash"
    drafter.mkdir()
    config = official_config(64, 4, 2, 2, 4, vocab, [0, 2], vocab - 1, 4)
    (drafter / "config.json").write_text(json.dumps(config))
    save_file(official_dflash(config, seed=0), str(drafter / "model.safetensors"))
    chosen = calibrate(pair_dirs, tmp_path, "dflash", ["--method", "dflash", "--drafter", str(drafter)], repeats=1)
    assert chosen["calibration"]["max_length"] == 3
    assert len(chosen["accepted_by_length"]) == len(chosen["tokens_per_s_by_length"]) == 3
    assert 1 <= chosen["length"] <= 3


@pytest.mark.serial
def test_a_calibration_beside_a_cpu_bound_process_chooses_the_idle_choice(pair_dirs, tmp_path):
    """Issue 66: the same models on a busy machine choose the same length. A CPU-bound process runs beside the
    second calibration; the acceptance is the same (greedy, same models), only the times differ, and
    the rule (sizes timed in turns, per-step costs as medians over prompts, a 3% tie to the shorter) absorbs them."""
    idle = calibrate(pair_dirs, tmp_path, "idle")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])]
    try:
        busy = calibrate(pair_dirs, tmp_path, "busy")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert busy["accepted_by_length"] == idle["accepted_by_length"]
    assert idle["accepted_by_length"][-1] > idle["accepted_by_length"][0] > 0  # the draft agrees: lengths compete
    assert busy["length"] == idle["length"], (idle["tokens_per_s_by_length"], busy["tokens_per_s_by_length"])
