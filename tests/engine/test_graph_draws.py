"""What captured verify graphs draw from on a GPU (``harness.engine.graph_draws.GraphGenerator``), on the CPU: one
generator per runtime, reseeded for each new run generator from its seed on a stream apart from the run's own
draws (so the verifier's uniforms never repeat a drafter's sampled drafts), the same seed giving the same stream,
and the default generator left to CUDA graphs. That the target's graphed verify forward makes the draws the eager
verifier makes: tests/engine/test_runtime.py."""

import torch

from harness.engine.graph_draws import GraphGenerator


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_a_graph_generator_follows_each_run_seed_on_its_own_stream():
    graphs = GraphGenerator(torch.device("cpu"))
    assert graphs.for_run(None) is None and graphs.generator is None
    run = _seeded(7)
    held = graphs.for_run(run)
    first = torch.rand(4, generator=held)
    assert not torch.equal(first, torch.rand(4, generator=_seeded(7)))  # not the run's own stream
    assert graphs.for_run(run) is held and not torch.equal(torch.rand(4, generator=held), first)  # same run: goes on
    again = graphs.for_run(_seeded(7))  # a new run with the same seed: the same stream again
    assert again is held and torch.equal(torch.rand(4, generator=again), first)
    assert not torch.equal(torch.rand(4, generator=graphs.for_run(_seeded(8))), first)
