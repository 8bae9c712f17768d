"""`eagle`'s batched drafting (methods/eagle/batch.py): the whole batch drafts in one head forward per draft step,
each row's trees, acceptances and drafter counters are the batch-1 adapter's, and the variants that override a
step draft their rows one after another."""

import copy

import pytest
import torch

from harness import SamplingConfig
from harness.backend.models import load_model
from harness.engine.batch_adapters import AdapterRows
from harness.engine.batched import generate_batch, rows_drafting
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter
from methods.eagle.adapter import EagleAdapter
from methods.eagle.batch import EagleRows
from tests.helpers import markov_batches, save_markov_target, train_test_drafter

SHAPE = {"top_k": 3, "depth": 4, "budget": 10}


@pytest.fixture(scope="module")
def trained_eagle(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle-batch")
    save_markov_target(root, layers=3)
    train_test_drafter("eagle", root, "head", 80)
    target = load_model(str(root / "target"), with_tokenizer=False)
    adapter, _ = build_adapter("eagle", SHAPE, BuildInputs(target, None, root / "head"))
    return target, adapter


def batch_prompts(count: int) -> list[torch.Tensor]:
    rows = next(markov_batches(48, count, 12, 11))
    return [row[None, : 5 + index % 6] for index, row in enumerate(rows)]  # 5 to 10 tokens: left padding


def test_the_batch_drafts_in_one_head_forward_per_draft_step(trained_eagle):
    target, adapter = trained_eagle
    assert isinstance(rows_drafting(adapter, 4), EagleRows)
    calls = []
    hook = adapter.head.register_forward_hook(lambda module, args, out: calls.append(out.shape[0]))
    try:
        results = generate_batch(target, adapter, batch_prompts(4), 24, SamplingConfig(), [None] * 4)
    finally:
        hook.remove()
    steps = max(len(result.counters.step_accepted) for result in results)
    assert len(calls) == steps * SHAPE["depth"]  # the catch-up, then one forward per deeper depth, every row at once
    assert calls[0] == 4  # batch rows in one forward


def test_each_row_drafts_and_is_charged_as_a_batch_one_generation(trained_eagle):
    """At T = 0 every row emits its batch-1 tokens with the batch-1 acceptances at every step, and its drafter
    counters (forwards, tokens, FLOPs, useful FLOPs) are the batch-1 generation's: the padding and the other rows
    are charged to no row."""
    target, adapter = trained_eagle
    prompts = batch_prompts(5)
    results = generate_batch(target, adapter, prompts, 24, SamplingConfig(), [None] * len(prompts))
    accepted = 0
    for prompt, result in zip(prompts, results):
        single = generate(target, adapter, prompt, 24, SamplingConfig())
        assert result.output_ids == single.output_ids
        assert result.counters.step_accepted == single.counters.step_accepted
        assert result.counters.drafter.forwards == single.counters.drafter.forwards
        assert result.counters.drafter.tokens == single.counters.drafter.tokens
        assert result.counters.drafter.flops == pytest.approx(single.counters.drafter.flops)
        assert result.counters.extra == pytest.approx(single.counters.extra)
        accepted += result.counters.accepted_tokens
    assert accepted > 0  # drafts were accepted, so the catch-up and the cropped frontiers were exercised


def test_variants_that_read_part_of_the_prompt_or_override_a_step_draft_rows_one_after_another(trained_eagle):
    """HiViS's ``visual_tokens: drop`` (the head reads the text positions alone) and every subclass (`prism`,
    `dream`, `mtp`, P-EAGLE: each overrides a step) opt out: their rows draft one after another."""
    _, adapter = trained_eagle
    hivis = copy.copy(adapter)
    hivis.image_token = 0
    subclass = copy.copy(adapter)
    subclass.__class__ = type("StepOverride", (EagleAdapter,), {})
    assert isinstance(rows_drafting(hivis, 3), AdapterRows) and isinstance(rows_drafting(subclass, 3), AdapterRows)
