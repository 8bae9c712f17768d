"""Greedy lossless: every method emits exactly the tokens `ar` emits (float32)."""

import pytest
import torch

from harness import SamplingConfig, generate
from harness.engine.method_spec import BuildInputs, build_adapter
from tests.helpers import PathTreeDrafter

GREEDY = SamplingConfig()
PROMPTS = [torch.randint(0, 48, (1, 3 + i % 9), generator=torch.Generator().manual_seed(i)) for i in range(24)]


def _ar_outputs(target, max_new_tokens=40):
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    return [generate(target, ar, prompt, max_new_tokens, GREEDY).output_ids for prompt in PROMPTS]


def test_ar_equals_transformers_generate(random_pair):
    target, _ = random_pair
    expected = _ar_outputs(target, 24)
    for prompt, ours in zip(PROMPTS[:8], expected[:8]):
        theirs = target.model.generate(prompt, max_new_tokens=24, do_sample=False)[0, prompt.shape[1]:].tolist()
        assert ours == theirs


@pytest.mark.parametrize("pair", ["random_pair", "trained_pair"])
@pytest.mark.parametrize("gamma", [1, 5])  # the shortest chain, and one longer than most accepted runs
def test_sd_greedy_equals_ar(request, pair, gamma):
    target, draft = request.getfixturevalue(pair)
    expected = _ar_outputs(target)
    sd, _ = build_adapter("sd", {"gamma": gamma}, BuildInputs(target, draft, None))
    accepted = 0
    for prompt, reference in zip(PROMPTS, expected):
        result = generate(target, sd, prompt, 40, GREEDY)
        assert result.output_ids == reference
        accepted += result.counters.accepted_tokens
    assert accepted > 0, "the drafts were never accepted: the test would not exercise the accept path"


@pytest.mark.parametrize("branching,mode", [((2, 2), "topk"), ((3, 1, 1), "topk"), ((1, 2, 2), "iid")])
def test_tree_verifier_greedy_equals_ar(trained_pair, branching, mode):
    target, draft = trained_pair
    expected = _ar_outputs(target)
    drafter = PathTreeDrafter(draft, branching, mode)
    for prompt, reference in zip(PROMPTS, expected):
        assert generate(target, drafter, prompt, 40, GREEDY).output_ids == reference


def test_step_interleaved_generations_match_and_time_only_their_own_steps(random_pair):
    """The runner's A/B interleaving: two generations take turns step by step; each makes the tokens it makes
    alone and its timers stop while the other runs."""
    import time

    from harness.engine.loop import generation_steps, run_interleaved

    target, draft = random_pair
    inputs = BuildInputs(target, draft, None)
    ar, sd = build_adapter("ar", {}, inputs)[0], build_adapter("sd", {"gamma": 3}, inputs)[0]
    expected = [generate(target, adapter, PROMPTS[1], 20, GREEDY).output_ids for adapter in (ar, sd)]
    started = time.perf_counter()
    results = run_interleaved([generation_steps(target, adapter, PROMPTS[1], 20, GREEDY, paused_between_steps=True)
                               for adapter in (ar, sd)])
    elapsed = time.perf_counter() - started
    assert [result.output_ids for result in results] == expected
    assert sum(result.counters.wall_seconds for result in results) <= elapsed  # no step counted twice
    for result in results:
        assert sum(result.counters.phase_seconds.values()) == pytest.approx(result.counters.wall_seconds)


def test_a_paused_stopwatch_leaves_the_pause_out():
    import time
    from types import SimpleNamespace

    from harness.backend.device import Stopwatch

    watch = Stopwatch(torch.device("cpu"))
    watch.pause()
    time.sleep(0.05)
    watch.resume()
    assert watch.elapsed() < 0.04
    with pytest.raises(ValueError, match="CUDA timing cannot be paused"):  # its events time the device queue
        Stopwatch.pause(SimpleNamespace(device=torch.device("cuda")))
