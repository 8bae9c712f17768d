"""`eagle`: lossless with random and trained heads over several tree shapes, official-layout loading,
the training CLI, and the unrolled (training-time test) attention mask."""

import subprocess
import sys

import pytest
import torch

from harness import SamplingConfig, wrap_model
from harness.analysis.metrics import USEFUL_DRAFTER_FLOPS
from harness.engine.adapter import NoDrafts
from harness.cli import main
from harness.trees.beam_shape import BeamShape
from harness.training.unroll import unrolled_step_bias
from harness.engine.loop import generate
from harness.errors import DraftcountError
from harness.data.token_streams import save_tokens
from harness.backend.models import load_model
from harness.engine.method_spec import BuildInputs, build_adapter
from methods.eagle.adapter import EagleAdapter
from methods.eagle.checkpoint import load_head, save_head
from tests.helpers import (ENGINE_SWITCHES, engine_runtime, make_llama, markov_batches, save_markov_target,
                           train_test_drafter)

SHAPES = [{"top_k": 2, "depth": 3, "budget": 6}, {"top_k": 4, "depth": 5, "budget": 24},
          {"top_k": 3, "depth": 6, "budget": 40}, {"top_k": 1, "depth": 4, "budget": 4}]


@pytest.fixture(scope="module")
def eagle_setup(tmp_path_factory):
    """A briefly trained Markov-language target (saved), its token stream, and three heads: random, trained,
    trained with EAGLE-3 fusion and unrolled steps."""
    root = tmp_path_factory.mktemp("eagle")
    save_markov_target(root, layers=3)

    def head(name, steps, **options):
        return train_test_drafter("eagle", root, name, steps, **options)

    metrics = {"random": head("random", 0), "trained": head("trained", 120),
               "eagle3": head("eagle3", 60, fusion="eagle3", unroll_steps="2")}
    target = load_model(str(root / "target"), with_tokenizer=False)
    return target, root, metrics


def _prompts(count, vocab=48, seed=7):
    batches = markov_batches(vocab, count, 10, seed)
    return [row[None] for row in next(batches)]


@pytest.mark.parametrize("head", ["random", "trained", "eagle3"])
def test_greedy_lossless(eagle_setup, head):
    target, root, _ = eagle_setup
    prompts = _prompts(22 if head == "trained" else 12)
    expected = [generate(target, NoDrafts(), prompt, 32, SamplingConfig()).output_ids for prompt in prompts]
    accepted_deep = 0
    shapes = {"random": SHAPES[:2], "trained": SHAPES, "eagle3": SHAPES[1:2]}[head]
    for shape in shapes:
        adapter, _ = build_adapter("eagle", shape, BuildInputs(target, None, root / head))
        for prompt, want in zip(prompts, expected):
            result = generate(target, adapter, prompt, 32, SamplingConfig())
            assert result.output_ids == want, (head, shape)
            accepted_deep += sum(result.counters.accepted_by_depth[1:])
    if head != "random":
        assert accepted_deep > 0  # paths deeper than one node were accepted, so the tree mechanics were exercised



def test_a_rejected_depth_one_draft_books_waste(eagle_setup):
    """A depth-1 head drafts from the catch-up forward that also feeds the accepted tokens' true features (context
    work): that forward's drafting position counts as wasted when its draft is rejected (drafter-FLOP waste read
    0.00 by construction before issue 79), its context positions as useful."""
    target, root, _ = eagle_setup
    shape = {"top_k": 1, "depth": 1, "budget": 1}
    adapter, _ = build_adapter("eagle", shape, BuildInputs(target, None, root / "random"))
    rejected = 0
    for prompt in _prompts(4):
        counters = generate(target, adapter, prompt, 16, SamplingConfig()).counters
        wasted = counters.drafter.flops - counters.extra[USEFUL_DRAFTER_FLOPS]
        rejected += counters.step_accepted.count(0)
        assert (wasted > 0.01 * counters.drafter.flops) == (counters.step_accepted.count(0) > 0)
        assert wasted <= counters.drafter.flops
    assert rejected > 0  # a random head's drafts: mostly rejected


@pytest.mark.parametrize("switch", list(ENGINE_SWITCHES))
def test_greedy_lossless_under_engine_switches(eagle_setup, switch):
    """Static KV caches (target and head) and the CUDA-graph path of the verify forward and of the head's
    catch-up and expansions (its buffers, run eagerly), with hidden states."""
    target, root, _ = eagle_setup
    adapter, _ = build_adapter("eagle", SHAPES[1], BuildInputs(target, None, root / "trained"))
    runtime = engine_runtime(target, switch)
    accepted_deep = head_forwards = 0
    for prompt in _prompts(10):
        want = generate(target, NoDrafts(), prompt, 32, SamplingConfig()).output_ids
        result = generate(target, adapter, prompt, 32, SamplingConfig(), runtime=runtime)
        assert result.output_ids == want
        accepted_deep += sum(result.counters.accepted_by_depth[1:])
        head_forwards += result.counters.drafter.forwards
    assert accepted_deep > 0
    if switch == "graph_buffers":  # the draft ran as graphed blocks (methods/eagle/graphed.py), its forwards counted
        graphs = runtime.graphs_of(adapter)
        assert graphs.calls == head_forwards and any(key[0] == "block" for key in graphs.graphs)


def test_training_beats_random_head(eagle_setup):
    _, _, metrics = eagle_setup
    assert metrics["random"]["train"]["steps"] == 0
    assert metrics["trained"]["train"]["steps"] == 120
    target, root, _ = eagle_setup
    taus = {}
    for head in ("random", "trained"):
        adapter, _ = build_adapter("eagle", SHAPES[1], BuildInputs(target, None, root / head))
        taus[head] = sum(generate(target, adapter, prompt, 32, SamplingConfig()).counters.tokens_per_forward
                         for prompt in _prompts(6))
    assert taus["trained"] > taus["random"] * 1.3


def test_official_layout_round_trip(eagle_setup, tmp_path):
    target, root, _ = eagle_setup
    head = load_head(root / "trained", target.model)
    save_head(head, tmp_path / "official", {}, official_bin=True)
    assert sorted(p.name for p in (tmp_path / "official").iterdir()) == ["config.json", "pytorch_model.bin"]
    names = set(torch.load(tmp_path / "official" / "pytorch_model.bin", weights_only=True))
    assert {"fc.weight", "fc.bias", "embed_tokens.weight", "layers.0.self_attn.q_proj.weight",
            "layers.0.mlp.down_proj.weight", "layers.0.post_attention_layernorm.weight"} <= names
    assert not any("input_layernorm" in name or name.startswith("norm") for name in names)
    loaded = load_head(tmp_path / "official", target.model)
    trees = {}
    for name, module in (("memory", head), ("official", loaded)):
        adapter = EagleAdapter(module, target, BeamShape(top_k=3, depth=4, budget=12))
        proposed = []
        original = adapter.propose

        def recording(ctx, sequence, original=original, proposed=proposed):
            tree = original(ctx, sequence)
            tree.resolve()
            proposed.append((tree.tokens.tolist(), tree.parents))
            return tree

        adapter.propose = recording
        for prompt in _prompts(4):
            generate(target, adapter, prompt, 24, SamplingConfig())
        trees[name] = proposed
    assert trees["memory"] == trees["official"] and len(trees["memory"]) > 4


def test_bad_drafter_directories(eagle_setup, tmp_path):
    target, root, _ = eagle_setup
    with pytest.raises(DraftcountError, match="holds no config.json"):
        build_adapter("eagle", {}, BuildInputs(target, None, tmp_path))
    wide = wrap_model(make_llama(vocab=48, hidden=64, layers=1, heads=4, seed=0))
    with pytest.raises(DraftcountError, match="48 wide; the target is 64"):
        build_adapter("eagle", {}, BuildInputs(wide, None, root / "trained"))
    with pytest.raises(DraftcountError, match="needs a trained drafter directory"):
        build_adapter("eagle", {}, BuildInputs(target, None, None))
    with pytest.raises(DraftcountError, match="top_k, depth and budget"):
        build_adapter("eagle", {"budget": "0"}, BuildInputs(target, None, root / "trained"))


def test_train_cli_zero_steps_then_run(tmp_path, model_dirs, shared_data, capsys):
    tokens = tmp_path / "tokens.pt"
    save_tokens(tokens, torch.randint(0, 200, (4000,)))
    out = tmp_path / "head"
    command = [sys.executable, "-m", "harness", "train", "--method", "eagle", "--target", str(model_dirs["target"]),
               "--data", str(tokens), "--out", str(out), "--steps", "0", "--no-progress",
               "--metrics", str(tmp_path / "metrics.json")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    run = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--method", "eagle", "--target", str(model_dirs["target"]),
         "--drafter", str(out), "--prompts", str(shared_data / "mt_bench"), "--limit", "2", "--max-new-tokens", "8",
         "--pair-with-ar", "--out", str(tmp_path / "eagle.jsonl"), "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert main(command[3:-2] + ["--opt", "fusion=eagle9"]) == 2
    assert "option 'fusion' of eagle training must be one of" in capsys.readouterr().err


def test_unrolled_step_bias():
    allowed = unrolled_step_bias(5, 2, torch.float32, torch.device("cpu"))[0, 0] == 0
    assert allowed.shape == (5, 15)
    for query in range(5):
        visible = {(index // 5, index % 5) for index in allowed[query].nonzero().flatten().tolist()}
        expected = {(0, key) for key in range(query - 1)} | {(1, query - 1), (2, query)}
        assert visible == {item for item in expected if item[1] >= 0}
    causal = unrolled_step_bias(4, 0, torch.float32, torch.device("cpu"))[0, 0] == 0
    assert torch.equal(causal, torch.ones(4, 4, dtype=torch.bool).tril())
