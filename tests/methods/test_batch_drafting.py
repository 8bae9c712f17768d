"""Drafters of a whole static batch (methods/{eagle,lyanna,dflash}/batch.py): one
drafter forward per draft step for every row, and each row's trees, acceptances and drafter counters those of the
batch-1 adapter; the settings that keep per-row drafter state the shared cache cannot hold draft rows one after
another."""

import copy

import pytest
import torch

from harness import SamplingConfig
from harness.backend.models import load_model
from harness.engine.batch_adapters import AdapterRows
from harness.engine.batched import generate_batch, rows_drafting
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter
from methods.dflash.adapter import DFlashAdapter
from methods.dflash.batch import DFlashRows
from methods.eagle.adapter import EagleAdapter
from methods.eagle.batch import EagleRows
from methods.lyanna.batch import LyannaRows
from tests.helpers import markov_batches, save_markov_target, train_test_drafter

SHAPE = {"top_k": 3, "depth": 4, "budget": 10}
CASES = {  # name: method, options, its drafting of a batch, drafter forwards per step
    "eagle": ("eagle", SHAPE, EagleRows, SHAPE["depth"]),
    "lyanna": ("lyanna", {**SHAPE, "reuse": "logits"}, LyannaRows, SHAPE["depth"]),
    "lyanna-no-reuse": ("lyanna", {**SHAPE, "reuse": "off"}, LyannaRows, SHAPE["depth"]),
    "dflash-chain": ("dflash", {}, DFlashRows, 1),
    "dflash-tree": ("dflash", {"top_k": 3, "budget": 10}, DFlashRows, 1),
}


@pytest.fixture(scope="module")
def trained_zoo(tmp_path_factory):
    """A Markov target with a briefly trained eagle head, lyanna drafter and dflash drafter."""
    root = tmp_path_factory.mktemp("batch-drafting")
    save_markov_target(root, layers=3)
    for method in ("eagle", "lyanna", "dflash"):
        train_test_drafter(method, root, method, 80)
    return load_model(str(root / "target"), with_tokenizer=False), root


def adapter_of(zoo, method: str, options: dict):
    target, root = zoo
    return build_adapter(method, options, BuildInputs(target, None, root / method))[0]


def batch_prompts(count: int) -> list[torch.Tensor]:
    rows = next(markov_batches(48, count, 12, 11))
    return [row[None, : 5 + index % 6] for index, row in enumerate(rows)]  # 5 to 10 tokens: left padding


@pytest.mark.parametrize("case", list(CASES))
def test_each_row_drafts_and_is_charged_as_a_batch_one_generation(trained_zoo, case):
    """At T = 0 every row emits its batch-1 tokens with the batch-1 acceptances at every step and the batch-1
    drafter counters (forwards, tokens, FLOPs, useful FLOPs and the method's own), the padding and the other rows
    charged to no row; the drafter runs once per draft step (the catch-up, then each further depth) for all rows."""
    method, options, drafting, forwards_per_step = CASES[case]
    target, _ = trained_zoo
    adapter = adapter_of(trained_zoo, method, options)
    assert isinstance(rows_drafting(adapter, 4), drafting)
    module = adapter.head if method == "eagle" else adapter.drafter
    rows_per_forward = []
    hook = module.register_forward_hook(lambda module, args, out: rows_per_forward.append(out.shape[0]))
    prompts = batch_prompts(5)
    try:
        results = generate_batch(target, adapter, prompts, 24, SamplingConfig(), [None] * len(prompts))
    finally:
        hook.remove()
    steps = max(len(result.counters.step_accepted) for result in results)
    assert len(rows_per_forward) == steps * forwards_per_step and rows_per_forward[0] == len(prompts)
    accepted = 0
    for prompt, result in zip(prompts, results):
        single = generate(target, adapter, prompt, 24, SamplingConfig())
        assert result.output_ids == single.output_ids
        assert result.counters.step_accepted == single.counters.step_accepted
        assert (result.counters.drafter.forwards, result.counters.drafter.tokens) == (
            single.counters.drafter.forwards, single.counters.drafter.tokens)
        assert result.counters.drafter.flops == pytest.approx(single.counters.drafter.flops)
        assert result.counters.extra == pytest.approx(single.counters.extra)
        accepted += result.counters.accepted_tokens
    assert accepted > 0  # drafts were accepted: the catch-up and the cropped slots were exercised


def test_per_row_drafter_state_drafts_rows_one_after_another(trained_zoo):
    """HiViS's ``visual_tokens: drop`` (the head reads the text positions alone), every subclass of the eagle
    adapter (`prism`, `dream`, `mtp`, P-EAGLE: each overrides a step), lyanna reusing states (speculative cache
    entries kept per row) and every subclass of the dflash adapter (`dspark` plans its step) opt out."""
    eagle = adapter_of(trained_zoo, "eagle", SHAPE)
    hivis = copy.copy(eagle)
    hivis.image_token = 0
    subclass = copy.copy(eagle)
    subclass.__class__ = type("StepOverride", (EagleAdapter,), {})
    states = adapter_of(trained_zoo, "lyanna", {**SHAPE, "reuse": "states"})
    planner = copy.copy(adapter_of(trained_zoo, "dflash", {}))
    planner.__class__ = type("PlansItsStep", (DFlashAdapter,), {})  # as `dspark` does
    assert all(isinstance(rows_drafting(adapter, 3), AdapterRows) for adapter in (hivis, subclass, states, planner))
