"""`polybasic`: the inner loop's block is distributed as the mid model, greedy equals `ar`, stage counters add up,
the catalog asks for both inputs, and the mid LM's trainer works with 0 steps and sizes it between draft and target."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from transformers import LlamaConfig

from harness import SamplingConfig, generate, wrap_model
from harness.analysis.metrics import USEFUL_DRAFTER_FLOPS
from harness.backend.cuda_graphs import GraphedForwards
from harness.catalog import Entry, entry
from harness.data.token_streams import save_tokens
from harness.engine.adapter import StepContext
from harness.engine.counters import GenerationCounters
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.engine.runtime import EngineRuntime
from harness.errors import DraftcountError
from harness.training.drafters import DrafterTrainRequest
from harness.training.features import dump_features
from harness.verify.sampling import logits_to_probs, make_generator
from methods.polybasic.adapter import PolybasicAdapter, PolybasicOptions
from methods.polybasic.training import MidTrainOptions, mid_shape, train_mid
from tests.capture_warmups import warmed_up
from tests.helpers import chi_square_pvalue, engine_runtime, exact_distribution, make_llama, markov_batches

ALPHA = 1e-3
PROMPT = [1, 2, 3]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (and leave the shared machine's other core alone)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def chain():
    """Peaked, disagreeing random models on 6 tokens: target, mid, small."""
    return tuple(wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=seed, init_range=1.0))
                 for seed in (0, 1, 2))


def _context(sampling: SamplingConfig, seed: int, runtime: EngineRuntime | None = None) -> StepContext:
    return StepContext(sampling, make_generator(seed, "cpu"), GenerationCounters(), 6, runtime=runtime,
                       max_sequence=0 if runtime is None else 16)


def _block(adapter: PolybasicAdapter, sampling: SamplingConfig, seed: int, runtime: EngineRuntime | None = None):
    ctx = _context(sampling, seed, runtime)
    with torch.inference_mode():
        adapter.begin(ctx, torch.tensor([PROMPT[:-1]]), None)
        return adapter.propose(ctx, torch.tensor([PROMPT]))


@pytest.mark.parametrize("switch", [None, "graph_buffers"])
def test_inner_loop_block_is_distributed_as_the_mid_model(chain, switch):
    """Eager, and with the rounds as graphed blocks (emulated on the CPU: ``methods.polybasic.graphed``)."""
    target, mid, small = chain
    sampling = SamplingConfig(1.0)
    runtime = engine_runtime(target, switch) if switch else None
    adapter = PolybasicAdapter(mid, small, PolybasicOptions(block=2, gamma_inner=1))  # 1 or 2 inner rounds
    counts = Counter(tuple(_block(adapter, sampling, seed, runtime).tokens[1:].tolist()) for seed in range(800))
    if runtime is not None:  # the rounds ran as blocks
        assert runtime.graphs_of(adapter.mid).calls >= 800 and runtime.graphs_of(adapter.small).calls >= 800
    assert chi_square_pvalue(counts, exact_distribution(mid, PROMPT, 2, sampling)) > ALPHA
    # the small model's (or the target's) distribution would be told apart: the test can fail
    assert chi_square_pvalue(counts, exact_distribution(small, PROMPT, 2, sampling)) < ALPHA


def test_block_carries_the_mid_models_distributions(chain):
    _, mid, small = chain
    sampling = SamplingConfig(1.0)
    tree = _block(PolybasicAdapter(mid, small, PolybasicOptions(block=5, gamma_inner=2)), sampling, 3)
    tokens = tree.tokens.tolist()
    with torch.no_grad():
        logits = mid.model(torch.tensor([PROMPT[:-1] + tokens])).logits[0, len(PROMPT) - 1:-1]
    expected = logits_to_probs(logits, sampling)
    assert tree.parents == (-1, 0, 1, 2, 3, 4)
    for node in range(1, tree.size):
        torch.testing.assert_close(tree.draft_probs[node], expected[node - 1], atol=1e-5, rtol=1e-4)
    greedy = _block(PolybasicAdapter(mid, small, PolybasicOptions(block=5, gamma_inner=2)), SamplingConfig(), 0)
    assert all(q is None for q in greedy.draft_probs)
    near_end = StepContext(SamplingConfig(), None, GenerationCounters(), 6, max_sequence=12)  # 2 tokens to emit
    adapter = PolybasicAdapter(mid, small, PolybasicOptions(block=5, gamma_inner=2))
    assert [adapter.block_for(near_end, length) for length in (2, 9, 10, 11)] == [5, 1, 1, 1]


@pytest.mark.parametrize("switch", [None, "graph_buffers"])
@pytest.mark.parametrize("block,gamma", [(3, 5), (5, 2), (1, 1)])
def test_greedy_equals_ar_and_counters_add_up(chain, block, gamma, switch):
    target, mid, small = chain
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    adapter = PolybasicAdapter(mid, small, PolybasicOptions(block=block, gamma_inner=gamma))
    for prompt in ([1, 2, 3], [4, 0, 5, 1]):
        ids = torch.tensor([prompt])
        expected = generate(target, ar, ids, 20, SamplingConfig()).output_ids
        runtime = engine_runtime(target, switch) if switch else None
        result = generate(target, adapter, ids, 20, SamplingConfig(), runtime=runtime)
        assert result.output_ids == expected
        counters, extra = result.counters, result.counters.extra
        assert extra["polybasic_mid_forwards"] + extra["polybasic_small_forwards"] == counters.drafter.forwards
        assert extra["polybasic_mid_flops"] + extra["polybasic_small_flops"] == pytest.approx(counters.drafter.flops)
        assert extra["polybasic_mid_forwards"] == extra["polybasic_inner_rounds"]
        assert extra["polybasic_small_forwards"] == gamma * extra["polybasic_inner_rounds"]
        useful = extra["polybasic_mid_useful_flops"] + extra["polybasic_small_useful_flops"]
        assert useful == pytest.approx(extra[USEFUL_DRAFTER_FLOPS])
        assert 0 < useful < counters.drafter.flops  # disagreeing models: some drafter work is wasted
        assert extra["polybasic_inner_accepted"] <= extra["polybasic_inner_drafted"]
        assert counters.phase_seconds["drafter"] > 0 and extra["polybasic_mid_seconds"] > 0
        assert all(n <= block + 1 for n in counters.step_tokens) and counters.drafted_tokens > 0


def test_catalog_needs_both_inputs(chain, tmp_path):
    target, _, small = chain
    item = entry("polybasic")
    assert item.needs_draft and item.needs_drafter
    with pytest.raises(DraftcountError, match=r"^method 'polybasic' needs a draft model \(--draft\)$"):
        build_adapter("polybasic", {}, BuildInputs(target, None, tmp_path))
    with pytest.raises(DraftcountError, match=r"^method 'polybasic' needs a trained drafter directory \(--drafter\)$"):
        build_adapter("polybasic", {}, BuildInputs(target, small, None))
    with pytest.raises(DraftcountError, match="needs must be one of"):
        Entry("x", "methods.x", "x", ("drafter", "draft", "draft"))
    assert not entry("sd").needs_drafter and entry("sd").needs_draft and not entry("ar").needs_draft
    with pytest.raises(DraftcountError, match="option 'block' of method 'polybasic' must be >= 1"):
        build_adapter("polybasic", {"block": "0"}, BuildInputs(target, small, tmp_path))


def test_mid_shape_lies_between_draft_and_target():
    zoo = LlamaConfig(vocab_size=4096, hidden_size=256, num_hidden_layers=16, num_attention_heads=8,
                      intermediate_size=704)
    shape = mid_shape(MidTrainOptions(), zoo)
    assert (shape.hidden_size, shape.num_layers, shape.num_heads, shape.intermediate_size) == (160, 4, 8, 440)
    tiny = LlamaConfig(vocab_size=48, hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96)
    shape = mid_shape(MidTrainOptions(), tiny)
    assert (shape.hidden_size, shape.num_layers) == (32, 2) and 24 < shape.hidden_size < 48
    assert mid_shape(MidTrainOptions(hidden_size=40, num_layers=3), tiny).hidden_size == 40


@pytest.mark.parametrize("steps", [0, 3])
def test_train_mid_then_run(chain, tmp_path, steps):
    target_model = make_llama(vocab=48, hidden=48, layers=3, heads=4, seed=2)
    target_model.save_pretrained(tmp_path / "target")
    save_tokens(tmp_path / "tokens.pt", next(markov_batches(48, 8, 64, seed=5)).flatten())
    request = DrafterTrainRequest(method="polybasic", target=str(tmp_path / "target"), data=tmp_path / "tokens.pt",
                                  out=tmp_path / "mid", steps=steps, progress=False,
                                  options={"seq_len": "48", "batch_size": "8", "lr": "3e-3"})
    metrics = train_mid(request)
    assert metrics["train"]["steps"] == steps and metrics["shape"]["hidden_size"] == 32
    target = wrap_model(target_model)
    small = wrap_model(make_llama(vocab=48, hidden=24, layers=1, heads=2, seed=3))
    adapter, _ = build_adapter("polybasic", {"block": "4"}, BuildInputs(target, small, tmp_path / "mid"))
    assert adapter.details["mid_parameters"] == metrics["trainable_parameters"]
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    ids = torch.tensor([[1, 5, 9]])
    assert generate(target, adapter, ids, 12, SamplingConfig()).output_ids == \
        generate(target, ar, ids, 12, SamplingConfig()).output_ids
    with pytest.raises(DraftcountError, match="directory without a feature dump"):
        train_mid(DrafterTrainRequest(method="polybasic", target=str(tmp_path / "target"), data=tmp_path,
                                      out=tmp_path / "x", steps=0, progress=False))
    torch.save(torch.arange(48), tmp_path / "short.pt")  # the kit's check: a stream shorter than one window
    with pytest.raises(DraftcountError, match="48 tokens do not fill one window of 48"):
        train_mid(DrafterTrainRequest(method="polybasic", target=str(tmp_path / "target"),
                                      data=tmp_path / "short.pt", out=tmp_path / "y", steps=0, progress=False,
                                      options={"seq_len": "48"}))


def test_train_mid_from_the_feature_dump(tmp_path):
    """The mid LM distils from the target's dump (its LM head over the 'last' states) as from the token stream."""
    target_model = make_llama(vocab=48, hidden=48, layers=3, heads=4, seed=2)
    target_model.save_pretrained(tmp_path / "target")
    tokens = next(markov_batches(48, 8, 64, seed=5)).flatten()
    dump_features(target_model, tokens, tmp_path / "dump", sequences=8, seq_len=48, layers=["last"], shard_size=8,
                  dtype="float16", seed=0)
    metrics = train_mid(DrafterTrainRequest(method="polybasic", target=str(tmp_path / "target"),
                                            data=tmp_path / "dump", out=tmp_path / "mid", steps=3, progress=False,
                                            options={"seq_len": "48", "batch_size": "8", "lr": "3e-3"}))
    assert metrics["train"]["steps"] == 3 and metrics["train"]["tokens"] == 3 * 8 * 48
    assert all(loss == loss for loss in metrics["train"]["losses"])  # finite, not NaN


def test_graphed_rounds_read_nothing_they_write(chain, monkeypatch):
    """On a GPU a graph's first call runs its body twice before the capture (``GraphedForwards._capture``), so a
    block that overwrote its own inputs would replay on what its warm-ups wrote. Emulated on the CPU
    (``tests.capture_warmups``): every graphed body runs three times a call; the generation is the same, accepted
    draft for accepted draft, as with one run."""
    target, mid, small = chain

    def run():
        adapter = PolybasicAdapter(mid, small, PolybasicOptions(block=5, gamma_inner=2))
        return [generate(target, adapter, torch.tensor([prompt]), 20, SamplingConfig(),
                         runtime=engine_runtime(target, "graph_buffers")) for prompt in ([1, 2, 3], [4, 0, 5, 1])]

    once = run()
    monkeypatch.setattr(GraphedForwards, "_replay", warmed_up)
    thrice = run()
    for first, again in zip(once, thrice):
        assert again.output_ids == first.output_ids
        assert again.counters.step_tokens == first.counters.step_tokens
        assert again.counters.extra["polybasic_inner_accepted"] == first.counters.extra["polybasic_inner_accepted"]
        assert first.counters.extra["polybasic_inner_accepted"] > 0  # drafts were accepted: the check can fail
