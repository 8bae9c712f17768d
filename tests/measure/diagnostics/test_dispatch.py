"""The dispatch count: ops booked by phase and kind, graphed bodies apart, and the CLI's table."""

import torch

from harness import SamplingConfig, wrap_model
from harness.backend.cuda_graphs import graphed_region
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.measure.diagnostics.dispatch import DispatchCounter, dispatch_per_step, main, replay_floor_per_step
from tests.helpers import make_llama


def test_ops_are_booked_by_phase_and_kind():
    counter = DispatchCounter()
    x = torch.arange(6.0)
    with counter:
        counter.restart()
        with counter.within("tree"):
            y = x + 1  # an op
            y.view(2, 3)  # a view
        with graphed_region():
            y * 2  # inside a graphed forward's body
        int(y[0])  # a host read: a synchronisation
        y[y > 2]  # boolean-mask indexing: a synchronisation
    assert counter.counts[("tree", "op")] == 1 and counter.counts[("tree", "view")] == 1
    assert counter.counts[("graph", "op")] == 1
    assert counter.counts[("host", "sync")] == 2


def test_ar_under_emulated_graphs_leaves_a_few_ops_outside_and_the_floor_one():
    lm = wrap_model(make_llama(vocab=64, hidden=32, layers=2, heads=2, seed=0).eval())
    prompt = torch.randint(0, 64, (1, 9), generator=torch.Generator(device="cpu").manual_seed(0))
    adapter, _ = build_adapter("ar", {}, BuildInputs(lm, None, None))
    graphed = EngineRuntime(lm, EngineOptions(kv_cache="static", cuda_graphs="on"), capture=False)
    eager = EngineRuntime(lm, EngineOptions(kv_cache="dynamic", cuda_graphs="off"))
    under_graphs = dispatch_per_step(lm, adapter, prompt, 12, SamplingConfig(), graphed)
    without = dispatch_per_step(lm, adapter, prompt, 12, SamplingConfig(), eager)
    assert under_graphs.graph > 50 and under_graphs.total() < 20  # the forward's ops live in the graph
    assert without.graph == 0 and without.phase("target") > 50  # eager: all of them launched per step
    floor = replay_floor_per_step(lm, prompt, 12)
    assert floor.total() == 1.0 and floor.syncs == 1.0  # the token's read alone


def test_the_table_lists_the_floor_and_each_method(capsys, tmp_path):
    main(["--methods", "ar,pld", "--new-tokens", "6", "--out", str(tmp_path / "dispatch.csv")])
    out = capsys.readouterr().out
    assert "(replay floor)" in out and "ops_outside_graphs" in out
    rows = (tmp_path / "dispatch.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["(replay floor)", "ar", "pld"]
