"""`prism`: the step-to-module map, the KV cache shared across modules, FLOPs per step equal to EAGLE's at M x the
parameters, greedy == ar with two distinct modules in the EAGLE-2 tree (dynamic and static caches, graph buffers),
the two training phases (phase 2 starts from copies of the phase-1 module) and the drafter directory round trip."""

import pytest
import torch
from transformers import DynamicCache

from harness import SamplingConfig
from harness.backend.models import load_model
from harness.engine.adapter import NoDrafts
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.drafters import DrafterTrainRequest
from harness.training.features import FeatureSpec
from harness.training.loop import TrainResult
from harness.trees.beam_shape import BeamShape
from methods.eagle.adapter import EagleAdapter
from methods.eagle.checkpoint import save_head
from methods.eagle.head import new_head
from methods.prism.adapter import PrismAdapter
from methods.prism.head import (
    PrismHead, check_step_modules, load_prism, module_of_step, new_prism_head, replicate_module, save_prism,
)
from methods.prism.training import PrismTrainOptions, phase_requests, remaining_budget
from tests.helpers import ENGINE_SWITCHES, engine_runtime, make_llama, markov_batches, save_markov_target, train_test_drafter

SHAPES = [{"top_k": 4, "depth": 5, "budget": 24}, {"top_k": 2, "depth": 3, "budget": 6},
          {"top_k": 1, "depth": 4, "budget": 4}]


@pytest.fixture(scope="module")
def prism_setup(tmp_path_factory):
    """A briefly trained Markov-language target (saved), its token stream, and PRISM drafters: untrained (0 steps),
    trained in both phases, and trained in phase 1 only."""
    root = tmp_path_factory.mktemp("prism")
    save_markov_target(root, layers=2)

    def drafter(name, steps, **options):
        return train_test_drafter("prism", root, name, steps, **options)

    metrics = {"random": drafter("random", 0), "trained": drafter("trained", 60),
               "phase1_only": drafter("phase1_only", 10, phase1_fraction="1.0")}
    target = load_model(str(root / "target"), with_tokenizer=False)
    return target, root, metrics


def _prompts(count, seed=7):
    return [row[None] for row in next(markov_batches(48, count, 10, seed))]


def _block_state(head, index):
    return {name: tensor.clone() for name, tensor in head.blocks[index].state_dict().items()}


def _same_state(left, right):
    return all(torch.equal(left[name], right[name]) for name in left)


def test_step_to_module_map():
    assert [module_of_step((1, 2), step) for step in range(1, 7)] == [0, 1, 1, 1, 1, 1]
    assert [module_of_step((1, 2, 3), step) for step in range(1, 6)] == [0, 1, 2, 2, 2]
    assert [module_of_step((1,), step) for step in range(1, 4)] == [0, 0, 0]
    assert [module_of_step((1, 2, 1), step) for step in range(1, 5)] == [0, 1, 0, 0]
    assert check_step_modules((1, 2)) == 2 and check_step_modules((2, 1, 3)) == 3
    for bad in [(), (0, 1), (1, 3), (2,)]:
        with pytest.raises(DraftcountError):
            check_step_modules(bad)
    with pytest.raises(DraftcountError):
        module_of_step((1, 2), 0)
    with pytest.raises(DraftcountError, match="never uses module"):
        parse_options(PrismTrainOptions, {"step_modules": "1,3"}, "prism training")
    with pytest.raises(DraftcountError, match="token-level"):  # GTO's tree loss is the eagle trainer's alone
        parse_options(PrismTrainOptions, {"objective": "gto"}, "prism training")


def test_later_module_reads_the_kv_cache_module_one_wrote():
    """Module 2's step after a module-1 catch-up depends on module 1's parameters (through the cache alone: without
    a prefix it does not), and the cache is one layer holding both modules' entries."""
    target = make_llama(vocab=32, hidden=32, layers=1, heads=4, seed=0)
    head = new_prism_head(target, (1, 2), seed=1).eval()
    features = torch.randn(1, 6, 32, generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(32, (1, 6), generator=torch.Generator().manual_seed(1))

    def second_step(with_prefix: bool) -> torch.Tensor:
        cache = DynamicCache(config=head.config)
        past = 0
        if with_prefix:
            head(features[:, :5], tokens[:, :5], torch.arange(5)[None], cache, step=1)
            past = 5
        out = head(features[:, 5:], tokens[:, 5:], torch.tensor([[past]]), cache, step=2)
        assert len(cache.layers) == 1 and cache.get_seq_length() == past + 1
        return out

    with torch.no_grad():
        before, alone_before = second_step(True), second_step(False)
        head.blocks[0].layer.self_attn.v_proj.weight.add_(0.5)  # module 1's values: only what it wrote changes
        after, alone_after = second_step(True), second_step(False)
    assert not torch.allclose(before, after, atol=1e-4)
    assert torch.equal(alone_before, alone_after)


def test_step_flops_equal_eagle_and_parameters_are_m_times(prism_setup):
    target, root, metrics = prism_setup
    eagle_head = new_head(target.model, FeatureSpec(), seed=0)
    lm_params = target.model.get_output_embeddings().weight.numel()
    for step_modules in [(1, 2), (1, 2, 3)]:
        head = new_prism_head(target.model, step_modules, seed=0)
        count = max(step_modules)
        assert head.trainable_parameters() == count * eagle_head.trainable_parameters()
        assert head.step_parameters() == eagle_head.trainable_parameters()
        for shape in [(1, 10, 1), (4, 30, 4), (9, 9, 1)]:
            assert head.cost(lm_params).forward_flops(*shape) == eagle_head.cost(lm_params).forward_flops(*shape)
    adapter, _ = build_adapter("prism", SHAPES[0], BuildInputs(target, None, root / "trained"))
    assert adapter.details["drafter_parameters"] == 2 * eagle_head.trainable_parameters()
    assert adapter.details["step_parameters"] == eagle_head.trainable_parameters()
    assert adapter.details["depth_modules"] == [1, 2, 2, 2, 2]
    assert metrics["trained"]["trainable_parameters"] == 2 * metrics["trained"]["step_parameters"]


def test_copies_of_an_eagle_head_draft_exactly_as_it(prism_setup, tmp_path):
    """A PRISM drafter whose two modules are copies of an EAGLE head builds the same trees with the same drafter
    FLOPs (and useful FLOPs) as that head: the shared adapter, FLOP counting and tree growth are EAGLE's."""
    target, _, _ = prism_setup
    eagle_head = new_head(target.model, FeatureSpec(), seed=4)
    for parameter in eagle_head.parameters():
        if parameter.requires_grad:
            parameter.data.normal_(0, 0.2)
    prism = PrismHead(eagle_head.config, (1, 2))
    state = {f"blocks.{index}.{name.replace('layers.0.', 'layer.')}": tensor
             for name, tensor in eagle_head.state_dict().items() if name != "embed_tokens.weight"
             for index in range(2)}
    prism.load_state_dict({**state, "embed_tokens.weight": eagle_head.embed_tokens.weight})
    shape = BeamShape(**SHAPES[0])
    eagle, ours = EagleAdapter(eagle_head, target, shape), PrismAdapter(prism.eval(), target, shape)
    for prompt in _prompts(2):
        want = generate(target, eagle, prompt, 16, SamplingConfig()).counters
        got = generate(target, ours, prompt, 16, SamplingConfig()).counters
        assert got.drafted_by_depth == want.drafted_by_depth and got.accepted_by_depth == want.accepted_by_depth
        assert got.drafter.flops == pytest.approx(want.drafter.flops) and got.drafter.flops > 0
        assert got.extra == pytest.approx(want.extra)


def test_training_phases_and_module_copies(prism_setup):
    target, root, metrics = prism_setup
    assert metrics["random"]["train"]["steps"] == 0
    assert metrics["trained"]["phase1"]["steps"] == 30 and metrics["trained"]["phase2"]["steps"] == 30
    assert metrics["trained"]["train"]["steps"] == 60
    assert metrics["phase1_only"]["phase2"]["steps"] == 0
    fresh = new_prism_head(target.model, (1,), seed=0)
    for name in ("random", "phase1_only"):  # what phase 2 starts from: every module a copy of phase 1's
        head = load_prism(root / name, target.model)
        assert _same_state(_block_state(head, 0), _block_state(head, 1))
        assert _same_state(_block_state(head, 0), _block_state(fresh, 0)) == (name == "random")
    trained = load_prism(root / "trained", target.model)
    assert not _same_state(_block_state(trained, 0), _block_state(trained, 1))  # phase 2 trained them apart
    grown = replicate_module(fresh, (1, 2, 3))
    assert grown.module_count == 3
    assert all(_same_state(_block_state(grown, index), _block_state(fresh, 0)) for index in range(3))
    with pytest.raises(DraftcountError):
        replicate_module(grown, (1, 2))


def test_phase_split_of_steps_and_time_budget(tmp_path):
    request = DrafterTrainRequest(method="prism", target="t", data=tmp_path, out=tmp_path, steps=11,
                                  time_budget_s=100.0, checkpoint=tmp_path / "ckpt.pt")
    first, second = phase_requests(request, 0.3)
    assert (first.steps, second.steps) == (3, 8) and first.time_budget_s == pytest.approx(30.0)
    assert first.checkpoint != second.checkpoint
    spent = TrainResult(steps=3, seconds=42.0, tokens=0, final_loss=0.0, resumed_from_step=0, stopped_by="steps")
    assert remaining_budget(request, spent) == pytest.approx(58.0)
    over = TrainResult(steps=3, seconds=140.0, tokens=0, final_loss=0.0, resumed_from_step=0, stopped_by="time_budget")
    assert 0 < remaining_budget(request, over) < 1e-6  # > 0: a 0 budget would mean "no limit"
    assert remaining_budget(DrafterTrainRequest("prism", "t", tmp_path, tmp_path), spent) == 0.0


@pytest.mark.parametrize("drafter", ["random", "trained"])
def test_greedy_equals_ar_with_two_modules(prism_setup, drafter):
    """Greedy output is ar's; in the tree, module 1 runs the catch-up (once a round) and module 2 every expansion."""
    target, root, _ = prism_setup
    prompts = _prompts(6 if drafter == "trained" else 3)
    expected = [generate(target, NoDrafts(), prompt, 24, SamplingConfig()).output_ids for prompt in prompts]
    accepted_deep = 0
    for shape in SHAPES if drafter == "trained" else SHAPES[:1]:
        adapter, _ = build_adapter("prism", shape, BuildInputs(target, None, root / drafter))
        calls = [0, 0]
        hooks = [block.layer.register_forward_hook(lambda *_, index=index: calls.__setitem__(index, calls[index] + 1))
                 for index, block in enumerate(adapter.head.blocks)]
        rounds = 0
        for prompt, want in zip(prompts, expected):
            result = generate(target, adapter, prompt, 24, SamplingConfig())
            assert result.output_ids == want, (drafter, shape)
            accepted_deep += sum(result.counters.accepted_by_depth[1:])
            rounds += len(result.counters.step_accepted)
        for hook in hooks:
            hook.remove()
        assert calls == [rounds, rounds * (shape["depth"] - 1)]
    if drafter == "trained":
        assert accepted_deep > 0


@pytest.mark.parametrize("switch", list(ENGINE_SWITCHES))
def test_greedy_equals_ar_under_engine_switches(prism_setup, switch):
    target, root, _ = prism_setup
    adapter, _ = build_adapter("prism", SHAPES[0], BuildInputs(target, None, root / "trained"))
    assert adapter.step_head(1)[1] != adapter.step_head(2)[1] == adapter.step_head(5)[1]  # a graph per module
    runtime = engine_runtime(target, switch)
    head_forwards = 0
    for prompt in _prompts(3):
        want = generate(target, NoDrafts(), prompt, 24, SamplingConfig()).output_ids
        result = generate(target, adapter, prompt, 24, SamplingConfig(), runtime=runtime)
        assert result.output_ids == want
        head_forwards += result.counters.drafter.forwards
    if switch == "graph_buffers":
        assert runtime.graphs_of(adapter).calls == head_forwards


def test_training_beats_the_untrained_drafter(prism_setup):
    target, root, _ = prism_setup
    taus = {}
    for name in ("random", "trained"):
        adapter, _ = build_adapter("prism", SHAPES[0], BuildInputs(target, None, root / name))
        taus[name] = sum(generate(target, adapter, prompt, 24, SamplingConfig()).counters.tokens_per_forward
                         for prompt in _prompts(4))
    assert taus["trained"] > taus["random"] * 1.3


def test_saved_drafter_loads_back_identically(prism_setup, tmp_path):
    target, root, _ = prism_setup
    head = load_prism(root / "trained", target.model)
    save_prism(head, tmp_path / "copy", {"target": "t"})
    again = load_prism(tmp_path / "copy", target.model)
    assert again.step_modules == head.step_modules == (1, 2)
    features = torch.randn(1, 7, 48, generator=torch.Generator().manual_seed(3))
    tokens = torch.randint(48, (1, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        for step in (1, 2, 3):
            want = head(features, tokens, torch.arange(7)[None], step=step)
            assert torch.equal(again(features, tokens, torch.arange(7)[None], step=step), want)
    assert not torch.equal(head(features, tokens, torch.arange(7)[None], step=1), want)


def test_bad_drafter_directories(prism_setup, tmp_path):
    target, root, _ = prism_setup
    save_head(new_head(target.model, FeatureSpec(), seed=0), tmp_path / "eagle", {})
    with pytest.raises(DraftcountError, match="not 'prism'"):
        load_prism(tmp_path / "eagle", target.model)
    with pytest.raises(DraftcountError, match="does not exist"):
        load_prism(tmp_path / "missing", target.model)
    other = make_llama(vocab=48, hidden=32, layers=1, heads=4, seed=0)
    with pytest.raises(DraftcountError, match="built for width"):
        load_prism(root / "trained", other)
    with pytest.raises(DraftcountError, match="unknown"):
        method_spec("prism").train(DrafterTrainRequest("prism", str(root / "target"), root / "tokens.pt",
                                                       tmp_path / "x", steps=0, options={"bogus": "1"}))
