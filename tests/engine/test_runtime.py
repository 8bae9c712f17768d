"""The engine's overhead switches: the static KV cache and the CUDA-graph verify path keep every method lossless,
the static cache is filled in place (no reallocation in a generation) and reused across generations, and bad
switch settings are clear errors. (CUDA-graph capture itself needs a GPU: here the graph path's static buffers
run eagerly, ``capture=False``; eagle and lyanna are covered in their own test files.)"""

import dataclasses
import logging
import subprocess
import sys

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from harness import SamplingConfig, generate
from harness.backend.cuda_graphs import GRAPHED_REGION, GraphedForwards
from harness.errors import DraftcountError
from harness.backend.forward import ForwardTally, positions, run_model
from harness.backend.kv_cache import new_cache
from harness.options import parse_options
from harness.verify.sampling import make_generator
from harness.backend.static_cache import static_layers
from harness.engine.runtime import (
    CAPACITY_STEP, RECOMPILE_LIMIT, SETTLING_WARMUPS, TIMING_RERUNS, EngineOptions, EngineRuntime, warm_up,
    without_captures,
)
from harness.engine.method_spec import BuildInputs, build_adapter
from tests.helpers import ENGINE_SWITCHES, engine_runtime

PROMPTS = [torch.randint(0, 48, (1, 3 + i % 9), generator=torch.Generator().manual_seed(i)) for i in range(8)]
METHODS = [("ar", {}), ("sd", {"gamma": 3}), ("tree_sd", {"branching": "2,2,1"})]


@pytest.mark.parametrize("switch", list(ENGINE_SWITCHES))
@pytest.mark.parametrize("method,options", METHODS)
def test_greedy_lossless_under_each_switch(random_pair, switch, method, options):
    target, draft = random_pair
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    adapter, _ = build_adapter(method, options, BuildInputs(target, draft, None))
    runtime = engine_runtime(target, switch)
    accepted = 0
    for prompt in PROMPTS:
        expected = generate(target, ar, prompt, 32, SamplingConfig()).output_ids
        result = generate(target, adapter, prompt, 32, SamplingConfig(), runtime=runtime)
        assert result.output_ids == expected
        accepted += result.counters.accepted_tokens
    assert method == "ar" or accepted > 0


@pytest.mark.parametrize("switch", list(ENGINE_SWITCHES))
def test_sampling_follows_the_same_random_stream(random_pair, switch):
    """With the same seed a switch changes no sampled token: the same logits, the same acceptance tests."""
    target, draft = random_pair
    adapter, _ = build_adapter("sd", {"gamma": 3}, BuildInputs(target, draft, None))
    runtime = engine_runtime(target, switch)
    sampling = SamplingConfig(temperature=1.0)
    for seed, prompt in enumerate(PROMPTS[:6]):
        plain = generate(target, adapter, prompt, 24, sampling, generator=make_generator(seed, target.device))
        switched = generate(target, adapter, prompt, 24, sampling, generator=make_generator(seed, target.device),
                            runtime=runtime)
        assert switched.output_ids == plain.output_ids


@pytest.mark.parametrize("method,options,draws", [
    ("ar", {}, "one_hot_draws"), ("sd", {"gamma": 3, "drafts": "topk"}, "one_hot_draws"),
    ("tree_sd", {"branching": "2,2,1", "drafts": "topk"}, "one_hot_draws"), ("sd", {"gamma": 3}, "chain_draws"),
    ("tree_sd", {"branching": "2,2,1"}, "tree_draws")])
def test_sampled_steps_draw_inside_the_targets_graph(random_pair, monkeypatch, method, options, draws):
    """At T > 0 the graphed verify forward makes the verification's draws inside its graph for deterministic
    drafts (q = 1: a root-only step, a chain and a host tree, parents made in the graph or copied in), for a
    chain of sampled drafts (their q copied in) and for a tree of them (its sibling ranks made once), from the same
    random stream in the same order as the eager verifier: the same sampled tokens with the same seed."""
    import harness.engine.graph_draws as graph_draws

    drawn = []
    real = getattr(graph_draws, draws)

    def spy(*args):
        drawn.append(GRAPHED_REGION.get())
        return real(*args)

    monkeypatch.setattr(graph_draws, draws, spy)
    target, draft = random_pair
    adapter, _ = build_adapter(method, options, BuildInputs(target, draft, None))
    runtime = engine_runtime(target, "graph_buffers")
    sampling = SamplingConfig(temperature=1.0, top_p=0.9)
    for seed, prompt in enumerate(PROMPTS[:4]):
        plain = generate(target, adapter, prompt, 24, sampling, generator=make_generator(seed, target.device))
        assert not drawn
        graphed = generate(target, adapter, prompt, 24, sampling, generator=make_generator(seed, target.device),
                           runtime=runtime)
        assert graphed.output_ids == plain.output_ids
        assert drawn and all(drawn), "no draws were made inside the verify forward's graph"
        drawn.clear()


def test_compiled_target_is_lossless(random_pair):
    """torch.compile's graph capture (Dynamo, dynamic shapes) of the target under the static cache; the eager
    backend keeps this fast on CPU (inductor's code generation is what `measure overheads` measures)."""
    target, draft = random_pair
    runtime = EngineRuntime(target, EngineOptions(kv_cache="static", compile="on", compile_backend="eager"))
    assert runtime.target.model is not target.model
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    sd, _ = build_adapter("sd", {"gamma": 3}, BuildInputs(target, draft, None))
    for prompt in PROMPTS[:3]:
        expected = generate(target, ar, prompt, 16, SamplingConfig()).output_ids
        assert generate(target, sd, prompt, 16, SamplingConfig(), runtime=runtime).output_ids == expected


def test_compile_keeps_compiling_past_dynamos_default_limit(random_pair):
    """One compiled target meets more guard sets than dynamo's default limit of 8 (prefill and verify, a mask or
    none, dynamic and static caches, three methods). Past the limit dynamo logs "hit config.recompile_limit" and
    runs the rest eagerly, so `compile` would be timing eager code; compile=on raises the limit."""
    target, draft = random_pair
    torch._dynamo.reset()
    hits: list[str] = []

    class LimitHits(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "recompile_limit" in record.getMessage():
                hits.append(record.getMessage())

    handler = LimitHits()
    logging.getLogger("torch._dynamo").addHandler(handler)
    try:
        for kv_cache in ("dynamic", "static"):
            runtime = EngineRuntime(target, EngineOptions(kv_cache=kv_cache, compile="on", compile_backend="eager"))
            for method, options in (("ar", {}), ("sd", {"gamma": 3}), ("tree_sd", {"branching": "2,2,1"})):
                adapter, _ = build_adapter(method, options, BuildInputs(target, draft, None))
                for prompt in PROMPTS[:4]:
                    generate(target, adapter, prompt, 12, SamplingConfig(), runtime=runtime)
    finally:
        logging.getLogger("torch._dynamo").removeHandler(handler)
    assert not hits, hits[0]
    assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT


def test_static_caches_are_filled_in_place_and_reused(random_pair):
    """kv_cache=static: the target's cache and the draft LM's own are allocated once and kept from one
    generation to the next (same buffers), and regrown only for a longer generation."""
    target, draft = random_pair
    adapter, _ = build_adapter("tree_sd", {"branching": "2,2,1"}, BuildInputs(target, draft, None))
    runtime = EngineRuntime(target, EngineOptions(kv_cache="static"))
    generate(target, adapter, PROMPTS[0], 16, SamplingConfig(), runtime=runtime)
    caches = {"target": runtime.static_cache, "draft": adapter.cache}

    def buffers() -> dict[str, list[tuple[int, int]]]:
        return {name: [(layer.key_buffer.data_ptr(), layer.value_buffer.data_ptr()) for layer in static_layers(cache)]
                for name, cache in caches.items()}

    addresses = buffers()
    assert static_layers(runtime.static_cache)[0].capacity == CAPACITY_STEP
    for prompt in PROMPTS[1:4]:
        generate(target, adapter, prompt, 40, SamplingConfig(), runtime=runtime)
    assert runtime.static_cache is caches["target"] and adapter.cache is caches["draft"] and buffers() == addresses
    long_prompt = torch.randint(0, 48, (1, CAPACITY_STEP), generator=torch.Generator().manual_seed(0))
    generate(target, adapter, long_prompt, 8, SamplingConfig(), runtime=runtime)
    assert static_layers(runtime.static_cache)[0].capacity == 2 * CAPACITY_STEP  # regrown for a longer generation
    generate(target, adapter, PROMPTS[0], 8, SamplingConfig(), runtime=EngineRuntime(target, EngineOptions()))
    assert static_layers(adapter.cache) is None  # another runtime, its own kind of cache


def test_bad_switches_are_clear_errors(random_pair, tmp_path):
    target, _ = random_pair
    with pytest.raises(DraftcountError, match="unknown option 'static'.*valid options: compile, compile_backend, compile_mode"):
        parse_options(EngineOptions, {"static": "on"}, "the engine")
    with pytest.raises(DraftcountError, match="cuda_graphs=verify needs kv_cache=static"):
        parse_options(EngineOptions, {"kv_cache": "dynamic", "cuda_graphs": "verify"}, "the engine")
    with pytest.raises(ValueError, match="cuda_graphs=verify needs kv_cache=static"):  # auto is dynamic on CPU
        EngineOptions(cuda_graphs="verify").resolved("cpu")
    with pytest.raises(DraftcountError, match="need a CUDA device"):
        GraphedForwards(target.device, target.dtype, capture=True)
    dynamic_rope = dataclasses.replace(target, model=LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        rope_scaling={"rope_type": "dynamic", "factor": 2.0})))
    with pytest.raises(DraftcountError, match="the target uses dynamic RoPE scaling.*cuda_graphs=off"):
        EngineRuntime(dynamic_rope, EngineOptions(kv_cache="static", cuda_graphs="verify"), capture=False)
    EngineRuntime(dynamic_rope, EngineOptions(kv_cache="static"))  # fine without graphs
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--method", "ar", "--target", "unused", "--prompts", "unused",
         "--out", str(tmp_path / "x.jsonl"), "--engine", "kv_cache=static", "--engine", "cuda_graphs=on"],
        capture_output=True, text=True)
    assert result.returncode != 0 and "cuda_graphs=on needs a CUDA device" in result.stderr


def test_graph_switches_route_the_forwards_they_name(random_pair):
    """cuda_graphs=verify graphs only the target's verify forward; on also the draft LM's steps (buffers run
    eagerly here: capture needs a GPU)."""
    target, draft = random_pair
    adapter, _ = build_adapter("sd", {"gamma": 3}, BuildInputs(target, draft, None))
    calls = {}
    for setting in ("verify", "on"):
        runtime = EngineRuntime(target, EngineOptions(kv_cache="static", cuda_graphs=setting), capture=False)
        result = generate(target, adapter, PROMPTS[1], 24, SamplingConfig(), runtime=runtime)
        calls[setting] = {name: runner.calls for name, runner in runtime.graph_runners().items()}
        assert calls[setting]["target"] == result.counters.target.forwards - 1  # the prefill stays eager
    assert set(calls["verify"]) == {"target"}
    assert calls["on"]["DraftLMAdapter-0"] == result.counters.drafter.forwards  # every draft-LM forward


def test_only_recurring_shapes_are_graphed(random_pair):
    """A drafter's first catch-up over the whole prompt (an empty cache) runs eagerly on its static cache, so
    prompts of new lengths add no graph; so does a forward over more than max_tokens positions."""
    target, draft = random_pair
    adapter, _ = build_adapter("sd", {"gamma": 3}, BuildInputs(target, draft, None))
    runtime = EngineRuntime(target, EngineOptions(kv_cache="static", cuda_graphs="on"), capture=False)
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    for prompt in PROMPTS:  # lengths 3..11
        expected = generate(target, ar, prompt, 16, SamplingConfig()).output_ids
        assert generate(target, adapter, prompt, 16, SamplingConfig(), runtime=runtime).output_ids == expected
    drafter = runtime.graphs_of(adapter)
    assert drafter.eager_calls == len(PROMPTS)  # one first catch-up per generation
    # the draft's blocks, one per catch-up length (key: ("block", ("draft_lm", count, shape, ...), ...)) and the
    # levels after a first catch-up ("draft_lm_levels"), and any forward graphed alone (key: caller, count, ...):
    # nothing longer than the chain's catch-ups
    counts = {key[1][1] if key[0] == "block" else key[1] for key in drafter.graphs
              if key[0] != "block" or key[1][0] == "draft_lm"}
    assert counts <= {1, 2, 3, 4} and any(key[0] == "block" for key in drafter.graphs)
    capped = GraphedForwards(target.device, target.dtype, capture=False, max_tokens=2)
    assert not capped.graphs_forward(0, 1) and capped.graphs_forward(5, 2) and not capped.graphs_forward(5, 3)


def test_a_reserved_runtime_never_regrows_its_caches(random_pair):
    """reserve() before the warm-up sizes the target's and the drafter's static caches for the run's longest
    sequence: a later, longer generation keeps the same buffers (its CUDA graphs stay valid)."""
    target, draft = random_pair
    adapter, _ = build_adapter("sd", {"gamma": 3}, BuildInputs(target, draft, None))
    runtime = EngineRuntime(target, EngineOptions(kv_cache="static", cuda_graphs="on"), capture=False)
    long_prompt = torch.randint(0, 48, (1, CAPACITY_STEP + 10), generator=torch.Generator().manual_seed(0))
    runtime.reserve(long_prompt.shape[-1] + 16 + 1)
    generate(target, adapter, PROMPTS[0], 4, SamplingConfig(), runtime=runtime)  # the warm-up: a short prompt
    caches = [runtime.static_cache, adapter.cache]
    graphs = {name: dict(runner.graphs) for name, runner in runtime.graph_runners().items()}
    assert all(static_layers(cache)[0].capacity == 2 * CAPACITY_STEP for cache in caches)
    generate(target, adapter, long_prompt, 16, SamplingConfig(), runtime=runtime)
    assert [runtime.static_cache, adapter.cache] == caches
    for name, runner in runtime.graph_runners().items():  # nothing dropped: the same graph objects, and more
        assert all(runner.graphs.get(key) is graph for key, graph in graphs[name].items())


def test_only_the_hidden_states_asked_for_are_kept(random_pair):
    """hidden_layers keeps the named hidden states (equal to a full forward's) and leaves None elsewhere, eager and
    through a graph runner, whose forward then returns only those (what a replay copies out)."""
    target, _ = random_pair
    prompt = PROMPTS[4]  # 7 tokens: 4 prefilled, 3 more in a second (graphable) forward
    full = run_model(target, prompt, new_cache(target.config), positions(0, 7, target.device), ForwardTally(),
                     output_hidden_states=True).hidden_states
    assert len(full) == target.config.num_hidden_layers + 1 and all(state is not None for state in full)
    for switch in ("off", "verify"):
        runtime = EngineRuntime(target, EngineOptions(kv_cache="static", cuda_graphs=switch), capture=False)
        cache = runtime.cache_for(16, 0)
        run_model(target, prompt[:, :4], cache, positions(0, 4, target.device), ForwardTally())
        kept = run_model(target, prompt[:, 4:], cache, positions(4, 3, target.device), ForwardTally(),
                         output_hidden_states=True, hidden_layers=(1, -1), graphs=runtime.graphs).hidden_states
        assert [state is None for state in kept] == [True, False, False]
        for index in (1, 2):
            torch.testing.assert_close(kept[index], full[index][:, 4:])
    assert runtime.graphs.calls == 1 and runtime.graphs.eager_calls == 0
    with pytest.raises(DraftcountError, match=r"hidden-state layers \[3\] do not exist"):
        run_model(target, prompt, new_cache(target.config), positions(0, 7, target.device), ForwardTally(),
                  output_hidden_states=True, hidden_layers=(3,))


@pytest.mark.parametrize("warmups,captured,expected", [
    (1, [3, 1, 0, 2], 3),  # goes on until a warm-up captures nothing
    (2, [0, 0, 5], 2),  # the asked-for warm-ups always run
    (1, [0, 7], 1),
    (1, [1] * 20, 1 + SETTLING_WARMUPS),  # bounded
    (0, [4], 0),  # no warm-up asked for: none
])
def test_warm_up_goes_on_while_it_captures_graphs(warmups, captured, expected):
    ran: list[int] = []

    def generate_once(index: int) -> None:
        ran.append(index)

    assert warm_up(generate_once, lambda: sum(captured[:len(ran)]), warmups) == expected
    assert ran == list(range(expected))


@pytest.mark.parametrize("captured,kept,left,discarded", [
    ([0], 0, 0, 0),  # captured nothing: timed once
    ([2, 0], 1, 0, 1),  # the first run captured: its rerun is kept
    ([1, 3, 0], 2, 0, 2),
    ([1] * 9, TIMING_RERUNS, 1, TIMING_RERUNS),  # bounded: the last run is kept with its capture
])
def test_a_timed_generation_that_captured_a_graph_runs_again(captured, kept, left, discarded):
    runs: list[int] = []

    def generate_once() -> int:
        runs.append(len(runs))
        return runs[-1]

    result, captured_in_kept, reruns = without_captures(generate_once, lambda: sum(captured[:len(runs)]))
    assert (result, captured_in_kept, reruns) == (kept, left, discarded)
    assert len(runs) == discarded + 1


def test_overhead_table_blanks_a_failed_pair_and_keeps_the_rest(monkeypatch):
    """measure overheads: a (method, setting) that raised keeps its error and leaves its figures, and every ratio
    that needs them, blank; the other pairs' ratios are still computed."""
    from harness.measure.diagnostics import overheads as bench
    tallies = {("ar", "eager"): bench.Tally(tokens=100, seconds=1.0, outputs=[[1, 2]]),
               ("ar", "static_cache"): bench.Tally(tokens=120, seconds=1.0, outputs=[[1, 2]]),
               ("lyanna", "eager"): bench.Tally(tokens=150, seconds=1.0, outputs=[[1, 3]]),
               ("lyanna", "static_cache"): bench.Tally(error="DraftcountError: static KV cache holds 256 positions")}
    rows = {(row["method"], row["setting"]): row for row in bench.table_rows(list(tallies), tallies, 1)}
    assert rows[("ar", "static_cache")]["ratio_to_eager"] == 1.2 and rows[("lyanna", "eager")]["speedup_over_ar"] == 1.5
    assert rows[("ar", "static_cache")]["outputs_differing_from_eager"] == "0/1"
    failed = rows[("lyanna", "static_cache")]
    assert failed["error"].startswith("DraftcountError") and all(
        failed[key] == "" for key in ("tokens_per_s", "ratio_to_eager", "speedup_over_ar", "outputs_differing_from_eager"))
    assert all(row["error"] == "" for key, row in rows.items() if key != ("lyanna", "static_cache"))


def test_auto_engine_is_the_fast_path_on_cuda_and_eager_elsewhere():
    auto = EngineOptions()
    assert auto.resolved("cpu") == EngineOptions(kv_cache="dynamic", cuda_graphs="off")
    assert auto.resolved("cuda") == EngineOptions(kv_cache="static", cuda_graphs="on")
    assert EngineOptions(kv_cache="dynamic").resolved("cuda").cuda_graphs == "off"  # eager stays a switch
    assert EngineOptions(kv_cache="static", cuda_graphs="verify").resolved("cuda").cuda_graphs == "verify"
    with pytest.raises(ValueError, match="needs kv_cache=static"):
        EngineOptions(kv_cache="dynamic", cuda_graphs="on")
