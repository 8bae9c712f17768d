"""`pard`: the training forward's blocks see what drafting sees, adapting a draft LM teaches its masks, a drafter
drafts k tokens from ONE forward and keeps `ar`'s output, a released layout (``pard_token`` in config.json) is read,
and `init_from: draft` starts from the workflow's draft LM."""

import json

import pytest
import torch

from harness import SamplingConfig
from harness.engine.adapter import NoDrafts
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.workflow_jobs import train_arguments
from transformers import AutoModelForCausalLM
from harness.training.drafters import DrafterTrainRequest
from harness.training.mask_blocks import drop_tokens
from methods.pard import training
from methods.pard.training import block_inputs, block_layout, train_pard, with_mask_token
from tests.helpers import (chi_square_pvalue, exact_distribution, make_llama, markov_batches,
                           markov_llama, sampled_distribution, save_greedy_markov_target, train_test_drafter)
from tests.methods.conformance import ALPHA, SAMPLES, build_small_vocab_zoo

GREEDY = SamplingConfig()


@pytest.mark.parametrize("kept", [None, [2, 3, 0]])
def test_each_block_sees_its_prefix_only(kept):
    """The training forward's window logits equal a plain forward, and each block's mask logits equal feeding its
    anchor's prefix and the masks alone: what the adapter feeds when it drafts (also for blocks cut short by the
    conditional drop-token)."""
    model = with_mask_token(make_llama(vocab=32, hidden=16, layers=2, heads=2, seed=0, init_range=0.5), 32)
    windows = torch.randint(32, (2, 20), generator=torch.Generator().manual_seed(0))
    layout = block_layout(20, [3, 9, 15], 4, kept)
    counts = kept or [3, 3, 3]
    slots_per_position = [len(slots) for slots in layout.draft_slots()]  # the anchors, then each mask j's blocks
    assert layout.masks == sum(counts) and slots_per_position == ([3, 2, 2, 1] if kept else [3, 3, 3, 3])
    with torch.no_grad():
        out = model(**block_inputs(windows, layout, 32, torch.float32)).logits
        assert torch.allclose(out[:, :20], model(input_ids=windows).logits, atol=1e-5)
        for anchor, count, start in zip([3, 9, 15], counts, layout.block_starts()):
            alone = torch.cat([windows[:, : anchor + 1], torch.full((2, count), 32)], dim=1)
            expected = model(input_ids=alone).logits[:, anchor + 1:]
            assert torch.allclose(out[:, start: start + count], expected, atol=1e-5)
    assert layout.labels[20:22].tolist() == [5, 6]  # mask j after anchor 3 learns x_{3 + 1 + j}


def test_the_conditional_drop_token_keeps_a_shrinking_share_of_each_mask():
    """PARD's COD: mask j kept by floor(anchors x max(ratio^j, minimum)) anchors, each with every mask before it."""
    generator = torch.Generator().manual_seed(0)
    for ratio, minimum, wanted in [(0.7, 0.2, [70, 48, 34, 24]), (0.5, 0.2, [50, 25, 20, 20]), (1.0, 0.0, [100] * 4)]:
        # (0.7^2 is 0.48999... in floating point: floor(100 x 0.7^2) = 48, as AMD's int() gives)
        kept = drop_tokens(100, 5, ratio, minimum, generator)
        assert [sum(count >= j for count in kept) for j in range(1, 5)] == wanted
    assert drop_tokens(3, 4, 0.5, 0.0, generator).count(0) >= 2  # floor(3 x 0.5) = 1 anchor keeps mask 1
    with pytest.raises(DraftcountError, match="0 < cod_ratio <= 1"):
        train_pard(DrafterTrainRequest(method="pard", target="t", data="d.pt", out="o", steps=0,
                                       options={"cod_ratio": "1.5"}))


@pytest.fixture(scope="module")
def pard_setup(tmp_path_factory):
    """A Markov target, a draft LM, and PARD drafters adapted from it (on the target's greedy text, the stream
    PARD's recipe reads: its masks can learn 2nd..k-th next tokens there) and not adapted."""
    root = tmp_path_factory.mktemp("pard")
    target = save_greedy_markov_target(root)
    markov_llama(hidden=24, layers=1, heads=2, seed=3).save_pretrained(root / "draft")
    options = {"init": str(root / "draft"), "anchors": "8"}
    metrics = {name: train_test_drafter("pard", root, name, steps, heldout=True, **options)
               for name, steps in [("adapted", 150), ("unadapted", 0)]}
    return target, root, metrics


def test_adapting_teaches_the_masks_and_one_forward_drafts_k_tokens(pard_setup):
    target, root, metrics = pard_setup
    adapted, unadapted = (metrics[name]["heldout_top1_agreement_by_step"] for name in ("adapted", "unadapted"))
    assert len(adapted) == 4 and sum(adapted[1:]) > 1.5 * sum(unadapted[1:]) + 0.3, (adapted, unadapted)
    adapter, _ = build_adapter("pard", {}, BuildInputs(target, None, root / "adapted"))
    assert adapter.details["drafter_parameters"] == metrics["adapted"]["trainable_parameters"] > 0  # the records' count
    assert sum(metrics["adapted"]["parameter_components"].values()) == metrics["adapted"]["trainable_parameters"]
    accepted = 0
    for prompt in [row[None] for row in next(markov_batches(48, 4, 10, seed=7))]:
        result = generate(target, adapter, prompt, 24, GREEDY)
        assert result.output_ids == generate(target, NoDrafts(), prompt, 24, GREEDY).output_ids
        steps = len(result.counters.step_accepted)
        assert result.counters.drafter.forwards == steps and max(result.counters.step_accepted) <= 4
        accepted += result.counters.accepted_tokens
        assert 0 < result.counters.extra.get("drafter_useful_flops", 0) <= result.counters.drafter.flops
    assert accepted > 4 * 24 * 0.2


def test_training_with_the_conditional_drop_token_runs_fewer_mask_slots(pard_setup, monkeypatch):
    target, root, _ = pard_setup
    seen = []
    original = training.block_loss
    monkeypatch.setattr(training, "block_loss", lambda model, windows, layout, *rest: seen.append(layout.masks)
                        or original(model, windows, layout, *rest))
    metrics = train_test_drafter("pard", root, "cod", 4, init=str(root / "draft"), anchors="20", cod_ratio="0.5",
                                 cod_min="0.1")
    assert seen == [10 + 5 + 2] * 4  # of 20 anchors x 3 masks: floor(20 x max(0.5^j, 0.1)) for j = 1, 2, 3
    assert metrics["options"]["cod_ratio"] == 0.5 and all(loss > 0 for loss in metrics["train"]["losses"])


def test_a_released_layout_is_read_and_a_plain_lm_is_refused(pard_setup, tmp_path):
    """AMD's PARD models are plain causal LMs whose config names the mask token (`pard_token`, as vLLM reads it),
    a token of their own vocabulary."""
    target, root, _ = pard_setup
    released = markov_llama(hidden=24, layers=1, heads=2, seed=3)
    released.config.pard_token = 47
    released.save_pretrained(tmp_path / "released")
    adapter, _ = build_adapter("pard", {"k": 3}, BuildInputs(target, None, tmp_path / "released"))
    assert adapter.mask_token == 47 and adapter.max_draft_nodes == 3
    prompt = next(markov_batches(48, 1, 10, seed=8))
    assert generate(target, adapter, prompt, 16, GREEDY).output_ids == generate(target, NoDrafts(), prompt, 16,
                                                                                  GREEDY).output_ids
    with pytest.raises(DraftcountError, match="no `pard_token`"):
        build_adapter("pard", {}, BuildInputs(target, None, root / "draft"))
    assert json.loads((root / "adapted" / "config.json").read_text())["pard_token"] == 48  # a new last row


def test_sampled_distribution_equals_the_target(tmp_path):
    """The sampling enumeration (the conformance suite's check) on the 6-token zoo, with the target itself adapted
    (0 steps: draft 1 is the target's own law, so nearly every step goes on to verify the masks' drafts) and a mask
    embedding unlike the others' (adapting starts it at their mean, where the masks' laws would hardly differ from
    draft 1's): a draft drawn from another law than the one it carries fails here (p < 1e-15), where the suite's
    fresh drafter cannot tell."""
    zoo = build_small_vocab_zoo(tmp_path)
    drafter = tmp_path / "pard"
    train_test_drafter("pard", tmp_path, "pard", 0, init=str(tmp_path / "target"))
    model = AutoModelForCausalLM.from_pretrained(drafter)
    with torch.no_grad():
        row = model.get_input_embeddings().weight[model.config.pard_token]
        row.copy_(torch.randn(row.shape, generator=torch.Generator().manual_seed(3)) * 3)
    model.save_pretrained(drafter)
    adapter, _ = build_adapter("pard", {}, BuildInputs(zoo.target, None, drafter))
    sampling = SamplingConfig(1.0)
    counts = sampled_distribution(zoo.target, adapter, [1, 2, 3], 3, sampling, SAMPLES, seed=0)
    assert chi_square_pvalue(counts, exact_distribution(zoo.target, [1, 2, 3], 3, sampling)) > ALPHA


def test_init_from_draft_starts_from_the_draft_lm():
    config = {"drafters": {"pard": {"init_from": "draft", "data": "tokens", "steps": 5}}, "bench": {}}
    arguments = train_arguments(config, "pard", "work/models/target", "work/data/tokens/train.pt", "h.pt", "work")
    assert arguments[arguments.index("--opt") + 1] == "init=work/models/draft"
    external = {**config, "models": {"target": "t", "draft": "/models/draft-lm"}}
    assert "init=/models/draft-lm" in train_arguments(external, "pard", "t", "d", "h", "work")
    hub = {**config, "models": {"target": "t", "draft": "amd/PARD-Llama-3.2-1B"}}  # a hub id: the fetched copy
    assert "init=work/hub/amd--PARD-Llama-3.2-1B" in train_arguments(hub, "pard", "t", "d", "h", "work")
    with pytest.raises(DraftcountError, match="needs models.draft"):
        train_arguments({**config, "models": {"target": "t"}}, "pard", "t", "d", "h", "work")


def test_bad_options_are_one_line_errors(pard_setup):
    target, root, _ = pard_setup
    with pytest.raises(DraftcountError, match="'k' of method 'pard' must be >= 1"):
        build_adapter("pard", {"k": 0}, BuildInputs(target, None, root / "adapted"))
    with pytest.raises(DraftcountError, match="k >= 2"):
        train_test_drafter("pard", root, "bad", 0, k="1")
    with pytest.raises(DraftcountError, match="not a directory"):
        train_test_drafter("pard", root, "bad", 0, init=str(root / "missing"))
