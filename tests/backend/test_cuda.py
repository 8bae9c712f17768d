"""What only a CUDA device runs, each method kept greedy-lossless in float32 through it: captured CUDA graphs
replayed for the target's verify forward and the drafters' steps, Lyanna's side stream, torch.compile,
CUDA-event timing and PyTorch's own report of host synchronisations.

Skipped on a machine without CUDA (CI); every name they use is imported at module level, so CI's collection of
this file (and tests/backend/test_cuda_imports.py) fails when a re-layout moves one. On a lent GPU the quick check
(docs/gpu.md) runs them beside the zoo's training: ``pytest -m cuda`` takes about 4 minutes on an H100 and names
the failing method x engine setting.

A float32 mismatch can in principle be a near-tie flip between the tree kernel and the one-token kernel
rather than a bug; the assertion message gives the target's top-2 logit margin at the first mismatch.
"""

import json
import subprocess
import sys

import pytest
import torch

from harness import SamplingConfig
from harness.catalog import entry, method_names
from harness.engine.adapter import NoDrafts
from harness.analysis.divergence import first_divergence
from harness.training.drafters import DrafterTrainRequest
from harness.engine.loop import generate
from harness.engine.runtime import EngineOptions, EngineRuntime, warm_up
from harness.measure.diagnostics.host_sync import PHASES, audit_generation
from harness.data.token_streams import save_tokens
from harness.backend.models import load_model
from harness.backend.device import Stopwatch, timer_name
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.measure.calibrations.latency import target_latencies
from harness.measure.shapes import SHAPES, scaled_shape, shaped_llama
from harness.measure.diagnostics.bare_loop import bare_decode_steps
from harness.measure.diagnostics.dispatch import dispatch_per_step, replay_floor_per_step
from harness.measure.diagnostics.replay_loop import ReplayLoop
from harness.engine.loop import run_interleaved
from harness import wrap_model
from methods.eagle.cost import step_latency as eagle_step_latency
from methods.lyanna.cost import step_latency as lyanna_depth_latency
from tests.helpers import make_llama, markov_batches, sampled_pairs_follow_the_target, train_briefly
from tests.methods.conformance import HOST_READ_BUDGETS

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

GREEDY = SamplingConfig()
NEW_TOKENS = 24
# variant -> (method, options): every catalog method with its default options, and lyanna's run-ahead and unfused
# verification (the paths with a side stream and a separate root forward)
VARIANTS = {**{name: (name, {}) for name in method_names()},
            "lyanna_overlap": ("lyanna", {"reuse": "states", "overlap": "on"}),
            "lyanna_unfused": ("lyanna", {"reuse": "states", "overlap": "on", "verify_fusion": "off"})}
GRAPHED_DRAFTERS = {"sd", "tree_sd", "eagle", "lyanna", "lyanna_overlap", "lyanna_unfused", "prism", "pard",
                    "owl"}  # a KV-cached net, or OWL's LSTM block
ENGINES = {"eager": EngineOptions(kv_cache="dynamic", cuda_graphs="off"),
           "static": EngineOptions(kv_cache="static", cuda_graphs="off"),
           "graphs_verify": EngineOptions(kv_cache="static", cuda_graphs="verify"),
           "graphs": EngineOptions(kv_cache="static", cuda_graphs="on")}


@pytest.fixture(scope="module")
def cuda_zoo(tmp_path_factory):
    """A briefly trained Markov-language target (3 layers), a draft LM (1 layer) and a briefly trained drafter of
    every catalog method that needs one, trained on the CPU and saved; the target and draft loaded on the GPU in float32."""
    root = tmp_path_factory.mktemp("cuda")
    train_briefly(make_llama(vocab=48, hidden=48, layers=3, heads=4, seed=2), steps=150).save_pretrained(root / "target")
    train_briefly(make_llama(vocab=48, hidden=24, layers=1, heads=2, seed=3), steps=150).save_pretrained(root / "draft")
    batches = markov_batches(48, 64, 48, seed=5)
    save_tokens(root / "tokens.pt", torch.cat([next(batches).flatten() for _ in range(4)]))
    for method in (name for name in method_names() if entry(name).needs_drafter):
        method_spec(method).train(DrafterTrainRequest(
            method=method, target=str(root / "target"), data=root / "tokens.pt", out=root / method, steps=80,
            progress=False, options={"seq_len": "48", "batch_size": "8", "lr": "3e-3"}))
    target = load_model(str(root / "target"), "float32", "cuda", with_tokenizer=False)
    draft = load_model(str(root / "draft"), "float32", "cuda", with_tokenizer=False)
    prompts = [row[None] for row in next(markov_batches(48, 6, 10, seed=7))]
    expected = [generate(target, NoDrafts(), prompt, NEW_TOKENS, GREEDY).output_ids for prompt in prompts]
    return {"root": root, "target": target, "draft": draft, "prompts": prompts, "expected": expected}


def _adapter(zoo: dict, variant: str):
    method, options = VARIANTS[variant]
    inputs = BuildInputs(zoo["target"], zoo["draft"] if entry(method).needs_draft else None,
                         zoo["root"] / method if entry(method).needs_drafter else None)
    return build_adapter(method, options, inputs)[0]


def _mismatch(zoo: dict, prompt: torch.Tensor, want: list[int], got: list[int]) -> str:
    """Where ``got`` leaves ``want``, with the target's top-2 margin there (a tiny one: a near-tie flip)."""
    position = first_divergence(want, got)
    ids = torch.tensor([prompt[0].tolist() + want[:position]], device=zoo["target"].device)
    with torch.no_grad():
        top = zoo["target"].model(ids).logits[0, -1].float().topk(2).values
    return f"first mismatch at token {position}: top-2 logit margin {float(top[0] - top[1]):.3g}"


def _check_lossless(zoo: dict, adapter, runtime: EngineRuntime, label: str) -> None:
    for prompt, want in zip(zoo["prompts"], zoo["expected"]):
        got = generate(zoo["target"], adapter, prompt.to("cuda"), NEW_TOKENS, GREEDY, runtime=runtime).output_ids
        assert got == want, f"{label}: {_mismatch(zoo, prompt, want, got)}"


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_lossless_on_cuda(cuda_zoo, variant, engine):
    """Twice over the prompts: the first pass captures each forward shape it meets, the second (same prompts,
    so the same shapes) only replays: it captures nothing new and gives the same tokens."""
    runtime = EngineRuntime(cuda_zoo["target"], ENGINES[engine])
    adapter = _adapter(cuda_zoo, variant)
    _check_lossless(cuda_zoo, adapter, runtime, f"{variant} {engine} (capturing)")
    captured = runtime.captures
    replays_before = {name: graphs.calls - graphs.eager_calls for name, graphs in runtime.graph_runners().items()}
    _check_lossless(cuda_zoo, adapter, runtime, f"{variant} {engine} (replaying)")
    assert runtime.captures == captured, "the same shapes again captured new graphs"
    if engine.startswith("graphs"):
        assert captured > 0 and replays_before["target"] < runtime.graphs.calls - runtime.graphs.eager_calls
        drafter_runner = runtime.graphs_of(adapter)
        if engine == "graphs" and variant in GRAPHED_DRAFTERS:
            assert drafter_runner is not None and drafter_runner.captures > 0, "the drafter's steps were not graphed"
        if engine == "graphs_verify":
            assert drafter_runner is None


@pytest.mark.parametrize("variant", ["ar", "eagle", "lyanna_overlap"])
def test_greedy_lossless_compiled(cuda_zoo, variant):
    """torch.compile (inductor) on the target, alone and under graphed verification: still the tokens of ar."""
    for options in (EngineOptions(compile="on"), EngineOptions(kv_cache="static", cuda_graphs="verify", compile="on")):
        runtime = EngineRuntime(cuda_zoo["target"], options)
        _check_lossless(cuda_zoo, _adapter(cuda_zoo, variant), runtime, f"{variant} {options}")


def test_ar_equals_transformers_generate_on_cuda(cuda_zoo):
    target = cuda_zoo["target"]
    for prompt, ours in zip(cuda_zoo["prompts"], cuda_zoo["expected"]):
        prompt = prompt.to("cuda")
        theirs = target.model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
                                       do_sample=False)[0, prompt.shape[1]:].tolist()
        assert ours == theirs


@pytest.mark.parametrize("variant", [name for name in VARIANTS if name != "lyanna_unfused"])
def test_one_host_sync_per_step_as_cuda_reports(cuda_zoo, variant):
    """With static caches and every graph, PyTorch's own report (set_sync_debug_mode) sees exactly one
    synchronising call per decoding step in verification (the read of the accepted path), and none while
    drafting, in the target's forward or in the adapter's bookkeeping, except for the methods that read the host by
    design (HOST_READ_BUDGETS, the CPU audit's budgets): their total stays within the budget. (Unfused verification reads its root
    forward's token as well: two per step, the overhead fusion removes.)"""
    target = cuda_zoo["target"]
    runtime = EngineRuntime(target, ENGINES["graphs"])
    adapter = _adapter(cuda_zoo, variant)
    prompt = cuda_zoo["prompts"][0].to("cuda")
    warm_up(lambda _: generate(target, adapter, prompt, NEW_TOKENS, GREEDY, runtime=runtime),
            lambda: runtime.captures, 1)  # captures synchronise: none may happen in the audited generation
    audit = audit_generation(target, adapter, prompt, NEW_TOKENS, GREEDY, runtime=runtime)
    assert audit.cuda_reported is not None and set(audit.cuda_reported) == set(PHASES)
    assert audit.cuda_reported["verify"] == pytest.approx(1.0), audit.cuda_reported
    elsewhere = sum(audit.cuda_reported[phase] for phase in ("propose", "forward", "commit"))
    if variant in HOST_READ_BUDGETS:  # a method that reads the host by design: within its budget
        budget, why = HOST_READ_BUDGETS[variant]
        assert 1 + elsewhere <= budget, f"{variant}: {audit.cuda_reported}, over its budget {budget} ({why})"
    else:
        assert elsewhere == 0, audit.cuda_reported
    assert audit.per_step == pytest.approx(1 + elsewhere), audit.by_operation  # the prediction agrees


def test_cuda_event_stopwatch():
    device = torch.device("cuda")
    assert timer_name(device) == "cuda_event"
    stopwatch = Stopwatch(device)
    torch.cuda._sleep(50_000_000)  # tens of milliseconds of GPU time, queued without waiting for it
    first = stopwatch.elapsed()  # waits for the GPU: the sleep is inside
    second = stopwatch.elapsed()
    assert 1e-3 < first <= second


def test_cli_run_records_cuda_timing_and_graphs(model_dirs, tmp_path):
    """`python -m harness run` on the GPU with every switch: cuda_event timer, prefill apart from the whole, no
    graph captured inside a kept timing (the warm-up captures, or a timed generation that captured is rerun)."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def add(a, b):\nThe quick brown fox\nfor i in range(10):\n")
    out = tmp_path / "sd.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--method", "sd", "--target", str(model_dirs["target"]),
         "--draft", str(model_dirs["draft"]), "--prompts", str(prompts), "--max-new-tokens", "40",
         "--opt", "gamma=3", "--pair-with-ar", "--device", "cuda", "--warmup", "3", "--engine", "kv_cache=static",
         "--engine", "cuda_graphs=on", "--out", str(out), "--no-progress"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3 * 2
    by_pair: dict = {}
    for record in records:
        assert record["timer"] == "cuda_event" and record["device"].startswith("cuda")
        counters = record["counters"]
        assert 0 < counters["prefill_seconds"] < counters["wall_seconds"]
        by_pair.setdefault(record["pair_id"], {})[record["method"]] = record["output_ids"]
    assert all(pair["sd"] == pair["ar"] for pair in by_pair.values())
    assert sum(record["graphs_captured"] for record in records) == 0, "a kept timing captured a graph"


def test_projection_latencies_replay_from_cuda_graphs():
    """The 8B-shape latency table's CUDA-graph timing (here at 1/16 of the shapes): the target's tree forwards,
    an EAGLE expansion and a Lyanna depth are captured on a static KV cache (a host sync or an allocation
    that moves would fail the capture) and their replays are timed."""
    model = shaped_llama(scaled_shape(SHAPES["llama-3.1-8b"], 16), torch.bfloat16, "cuda")
    latencies = target_latencies(model, prefix=64, sizes=[1, 16], repeats=3, timing="cuda_graphs")
    assert set(latencies) == {1, 16} and all(0 < seconds < 1 for seconds in latencies.values())
    assert 0 < eagle_step_latency(model, top_k=4, prefix=64, repeats=3, timing="cuda_graphs") < 1
    assert 0 < lyanna_depth_latency(model, top_k=4, prefix=64, repeats=3, timing="cuda_graphs") < 1


def test_replay_loop_captures_one_step_and_decodes_as_a_plain_loop():
    """The engine's floor (``measure bare-loop``'s replay): one captured step per token, the same tokens as a plain
    eager loop, and after the capture no op dispatched per token outside the graph but the token's read."""
    target = make_llama(vocab=64, hidden=32, layers=2, heads=2, seed=0).to("cuda").eval()
    lm = wrap_model(target)
    prompt = torch.randint(0, 64, (1, 9), generator=torch.Generator(device="cpu").manual_seed(0)).to("cuda")
    loop = ReplayLoop(lm, 9 + 20)
    tokens = loop.decode(prompt, 20)
    assert loop.capture and tokens == run_interleaved([bare_decode_steps(lm, prompt, 20)])[0].tokens
    floor = replay_floor_per_step(lm, prompt, 20)
    assert floor.total() <= 1.0 and floor.graph == 0  # the read alone; the step's ops live in the graph


def test_dispatch_counts_nothing_inside_a_replayed_graph():
    """Under CUDA graphs `ar`'s target forward is replayed: its ops are counted at capture only, so a counted
    generation after the warm-up books none to the graph and a handful outside it."""
    target = make_llama(vocab=64, hidden=32, layers=2, heads=2, seed=0).to("cuda").eval()
    lm = wrap_model(target)
    adapter, _ = build_adapter("ar", {}, BuildInputs(lm, None, None))
    runtime = EngineRuntime(lm, EngineOptions(kv_cache="static", cuda_graphs="on"))
    prompt = torch.randint(0, 64, (1, 9), generator=torch.Generator(device="cpu").manual_seed(0)).to("cuda")
    counts = dispatch_per_step(lm, adapter, prompt, 16, GREEDY, runtime)
    assert counts.graph == 0 and 0 < counts.total() < 20, counts


@pytest.mark.parametrize("variant", ["ar", "sd", "tree_sd", "pard", "eagle", "dflash", "dspark"])
def test_sampling_draws_replayed_in_the_verify_graph_follow_the_target(cuda_zoo, variant):
    """At T = 1 under CUDA graphs the verifier's draws replay inside the target's graph (a root-only step, a sampled
    chain, tree_sd's sampled tree, EAGLE's top-k tree), and the sampled drafts of sd, tree_sd, pard, DFlash and
    DSpark inside their drafter's block, from the runtime's graph generator: the same seed gives the same tokens, and the first two tokens over 300 seeds follow
    the target's law (a stream that did not move on between replays, or a generator the graph did not register,
    would repeat one token). Last in the file: a quick check's CUDA stage cut short by its window runs the greedy
    checks first. On the CPU: tests/engine/test_runtime.py."""
    runtime = EngineRuntime(cuda_zoo["target"], ENGINES["graphs"])
    sampled_pairs_follow_the_target(cuda_zoo["target"], _adapter(cuda_zoo, variant), cuda_zoo["prompts"][0].to("cuda"),
                                    runtime, range(100, 400), SamplingConfig(1.0))
    assert runtime.captures > 0 and runtime.graph_generator.generator is not None
