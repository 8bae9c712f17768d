"""The engine's floor: one decoding step on the device per token, the same tokens as a plain loop (CPU: the step
runs eagerly on the same buffers a GPU captures)."""

import torch

from harness import wrap_model
from harness.engine.loop import run_interleaved
from harness.measure.diagnostics.bare_loop import bare_decode_steps
from harness.measure.diagnostics.replay_loop import ReplayLoop
from tests.helpers import make_llama


def test_replay_loop_decodes_as_a_plain_loop_prompt_after_prompt():
    lm = wrap_model(make_llama(vocab=64, hidden=32, layers=2, heads=2, seed=1).eval())
    loop = ReplayLoop(lm, 40)
    for seed, length in ((0, 9), (1, 5), (2, 12)):  # the buffers reset between prompts of other lengths
        prompt = torch.randint(0, 64, (1, length), generator=torch.Generator(device="cpu").manual_seed(seed))
        expected = run_interleaved([bare_decode_steps(lm, prompt, 20)])[0].tokens
        assert loop.decode(prompt, 20, read_each_token=seed == 1) == expected
    assert not loop.capture  # a CPU: nothing captured
