"""`dflash`: the drafter against a restatement of z-lab's forward (their checkpoint layout on random weights), its
cache across steps, its loader's one-line errors, the training mask, the top-k tree, and the graphed draft
(``methods.dflash.graphed``, `dspark`'s too) against the eager one. Greedy and sampling losslessness of the default
chain: the conformance suite. ``DFLASH_REPO=<checkout of z-lab/dflash>`` also runs the upstream module on the same
weights."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from harness import SamplingConfig, generate, wrap_model
from harness.engine.batched import generate_batch
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from methods.dflash.checkpoint import load_drafter
from methods.dflash.model import default_target_layers
from methods.dflash.training import block_attention_bias, draw_anchors
from tests.helpers import (ENGINE_SWITCHES, assert_drafts_as_eager, engine_runtime, make_llama, markov_batches,
                           save_greedy_markov_target, train_test_drafter)
from tests.methods.dflash_reference import dflash_forward, official_config, official_dflash

VOCAB, WIDTH, DEPTH = 40, 32, 4


@pytest.fixture(scope="module")
def target():
    return make_llama(vocab=VOCAB, hidden=WIDTH, layers=DEPTH, heads=4, seed=3, init_range=0.3)


def config_for(block: int = 4, mask: int = 7, layers: tuple[int, ...] = (0, 2)) -> dict:
    return official_config(WIDTH, 4, 2, 2, block, VOCAB, list(layers), mask, DEPTH)


def write_official(directory: Path, config: dict, weights: dict[str, torch.Tensor]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    save_file({name: tensor.contiguous() for name, tensor in weights.items()}, str(directory / "model.safetensors"))
    return directory


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> tuple[Path, dict, dict]:
    config = config_for()
    weights = official_dflash(config, seed=0)
    return write_official(tmp_path_factory.mktemp("dflash") / "zlab", config, weights), config, weights


def block_of(target, root: int, mask: int, block: int) -> torch.Tensor:
    return target.get_input_embeddings().weight[torch.tensor([root] + [mask] * (block - 1))].detach()


@torch.no_grad()
def test_forward_matches_the_official_layout(target, released):
    directory, config, weights = released
    drafter = load_drafter(directory, target)
    states = torch.randn(6, 2 * WIDTH, generator=torch.Generator().manual_seed(1))
    block = block_of(target, 3, 7, 4)
    ours = drafter(drafter.context([states[None, :, :WIDTH], states[None, :, WIDTH:]]), block[None],
                   torch.arange(10)[None])[0]
    theirs = dflash_forward(weights, config, states, block, torch.arange(6), torch.arange(6, 10))
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-5)
    assert drafter.draft_rows(ours).shape[0] == 3  # z-lab: the mask slots draft, slot 0 does not


@torch.no_grad()
def test_cached_steps_equal_a_forward_over_the_whole_context(target, released):
    """Step 2 feeds only the new context rows; the cache holds step 1's context (its block dropped)."""
    directory, config, weights = released
    drafter = load_drafter(directory, target)
    states = torch.randn(9, 2 * WIDTH, generator=torch.Generator().manual_seed(2))
    rows = lambda part: [part[None, :, :WIDTH], part[None, :, WIDTH:]]  # noqa: E731
    from harness.backend.kv_cache import crop_cache, new_cache

    cache = new_cache(drafter.config)
    drafter(drafter.context(rows(states[:5])), block_of(target, 1, 7, 4)[None], torch.arange(9)[None], cache)
    crop_cache(cache, 5)
    step2 = drafter(drafter.context(rows(states[5:])), block_of(target, 2, 7, 4)[None], torch.arange(5, 13)[None],
                    cache)[0]
    full = dflash_forward(weights, config, states, block_of(target, 2, 7, 4), torch.arange(9), torch.arange(9, 13))
    assert torch.allclose(step2, full, atol=1e-5, rtol=1e-5)


def test_a_released_drafter_decodes_losslessly(target, released):
    model = wrap_model(target)
    ar, _ = build_adapter("ar", {}, BuildInputs(model, None, None))
    for options in ({}, {"top_k": "3", "budget": "6"}, {"verify_length": "2"}):
        adapter, _ = build_adapter("dflash", options, BuildInputs(model, None, released[0]))
        for seed in range(3):
            prompt = torch.randint(VOCAB, (1, 7), generator=torch.Generator().manual_seed(seed))
            expected = generate(model, ar, prompt, 24, SamplingConfig()).output_ids
            result = generate(model, adapter, prompt, 24, SamplingConfig())
            assert result.output_ids == expected, options
            assert result.counters.drafter.forwards == result.counters.target.forwards - 1  # one per block
    assert adapter.drafts > 2 and adapter.max_draft_nodes == 2  # the block drafted whole, its first 2 verified
    batch = [torch.randint(VOCAB, (1, 5 + seed), generator=torch.Generator().manual_seed(seed)) for seed in range(3)]
    rows = generate_batch(model, adapter, batch, 24, SamplingConfig(), [None] * len(batch))  # one forward, 3 rows
    assert [row.output_ids for row in rows] == [generate(model, ar, prompt, 24, SamplingConfig()).output_ids
                                                for prompt in batch]
    with pytest.raises(DraftcountError, match="option 'verify_length' of dflash cuts a chain"):
        build_adapter("dflash", {"top_k": "3", "verify_length": "2"}, BuildInputs(model, None, released[0]))


@pytest.mark.parametrize("change, message", [
    (lambda config, weights: weights.pop("fc.weight"), "missing weights fc.weight"),
    (lambda config, weights: weights.update({"norm.weight": torch.ones(3)}), "wrong shape: norm.weight"),
    (lambda config, weights: weights.update({"markov_head.markov_w1.weight": torch.ones(2, 2)}), "unexpected weights"),
    (lambda config, weights: config.pop("block_size"), "lacks block_size"),
    (lambda config, weights: config["dflash_config"].update(mask_token_id=VOCAB), "mask token 40 is outside"),
    (lambda config, weights: config["dflash_config"].update(target_layer_ids=[0, DEPTH]), "not all in -1..3"),
    (lambda config, weights: config.update(hidden_size=48), "built for width 48"),
])
def test_a_malformed_drafter_stops_with_one_line(tmp_path, target, change, message):
    config, weights = config_for(), official_dflash(config_for(), seed=0)
    change(config, weights)
    with pytest.raises(DraftcountError, match=message) as error:
        load_drafter(write_official(tmp_path / "bad", config, weights), target)
    assert "\n" not in str(error.value)


def test_target_layers_follow_z_labs_spacing():
    assert default_target_layers(36, 5) == (1, 9, 17, 25, 33)  # Qwen3-8B's released drafter
    assert default_target_layers(32, 5) == (1, 8, 15, 22, 29)
    assert default_target_layers(36, 1) == (18,)
    assert default_target_layers(3, 2) == (0, 2)  # too shallow for 1..L-3: spread over every layer


def test_training_blocks_see_the_context_before_their_anchor_and_themselves():
    anchors = torch.tensor([[1, 4]])
    visible = block_attention_bias(anchors, 6, 2, torch.float32)[0, 0] == 0
    assert visible[0, :6].tolist() == [True, False, False, False, False, False]  # block 0: context before 1
    assert visible[2, :6].tolist() == [True, True, True, True, False, False]  # block 1: context before 4
    assert visible[0, 6:].tolist() == [True, True, False, False] and visible[3, 6:].tolist() == [False, False, True,
                                                                                                  True]
    drawn = draw_anchors(3, 20, 8, 5, torch.Generator().manual_seed(0))
    assert drawn.shape == (3, 5) and int(drawn.max()) <= 20 - 8 - 1 and bool((drawn.diff(dim=-1) > 0).all())


@pytest.mark.skipif(not os.environ.get("DFLASH_REPO"), reason="set DFLASH_REPO to a checkout of z-lab/dflash")
@torch.no_grad()
def test_the_upstream_module_agrees(target, released):
    sys.path.insert(0, os.environ["DFLASH_REPO"])
    from dflash.model import DFlashDraftModel  # noqa: PLC0415 (the upstream checkout, opt-in)
    from transformers import Qwen3Config

    directory, config, weights = released
    upstream = DFlashDraftModel(Qwen3Config(**{key: value for key, value in config.items()
                                               if key not in ("architectures", "model_type")}))
    missing, unexpected = upstream.load_state_dict(weights, strict=False)
    assert not unexpected and not [name for name in missing if "rotary" not in name]
    upstream.eval()
    drafter = load_drafter(directory, target)
    states = torch.randn(1, 6, 2 * WIDTH, generator=torch.Generator().manual_seed(4))
    block = block_of(target, 5, 7, 4)[None]
    theirs = upstream(position_ids=torch.arange(10)[None], noise_embedding=block, target_hidden=states,
                      is_causal=False)
    ours = drafter(drafter.context([states[..., :WIDTH], states[..., WIDTH:]]), block, torch.arange(10)[None])
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-5)


def test_a_drafter_with_its_own_embedding_and_head_trains_saves_and_decodes_losslessly(tmp_path, target):
    from harness.data.token_streams import save_tokens
    from harness.engine.method_spec import method_spec
    from harness.training.drafters import DrafterTrainRequest, read_weights

    target.save_pretrained(tmp_path / "target")
    save_tokens(tmp_path / "tokens.pt", torch.randint(VOCAB, (600,), generator=torch.Generator().manual_seed(5)))
    request = DrafterTrainRequest(method="dflash", target=str(tmp_path / "target"), data=tmp_path / "tokens.pt",
                                  out=tmp_path / "own", steps=3, progress=False, heldout=tmp_path / "tokens.pt",
                                  options={"seq_len": "32", "batch_size": "2", "own_embedding": "true",
                                           "own_lm_head": "true", "block_size": "4"})
    metrics = method_spec("dflash").train(request)
    assert len(metrics["heldout_top1_agreement_by_step"]) == 3  # the block's mask slots
    assert {"embed_tokens.weight", "lm_head.weight"} <= set(read_weights(tmp_path / "own"))
    drafter = load_drafter(tmp_path / "own", target)
    assert drafter.embed_tokens is not None and drafter.lm_head is not None
    model = wrap_model(target)
    ar, _ = build_adapter("ar", {}, BuildInputs(model, None, None))
    adapter, _ = build_adapter("dflash", {}, BuildInputs(model, None, tmp_path / "own"))
    assert adapter.embed is not target.get_input_embeddings()
    hidden = torch.randn(3, target.config.hidden_size)  # the drafter's own head drafts, not the target's
    assert torch.equal(adapter.drafter.logits(hidden, adapter.lm_head), adapter.drafter.lm_head(hidden))
    prompt = torch.randint(VOCAB, (1, 6), generator=torch.Generator().manual_seed(6))
    assert generate(model, adapter, prompt, 16, SamplingConfig()).output_ids == \
        generate(model, ar, prompt, 16, SamplingConfig()).output_ids


@pytest.fixture(scope="module")
def graphed_setup(tmp_path_factory):
    """The Markov target on its own greedy text and briefly trained drafters of block 4: a `dflash` one with a
    vocabulary token as its mask, a `dspark` one with a learned mask embedding."""
    root = tmp_path_factory.mktemp("graphed")
    target = save_greedy_markov_target(root)
    train_test_drafter("dflash", root, "dflash", 60, block_size="4", mask_token_id="47")
    train_test_drafter("dspark", root, "dspark", 60, block_size="4", markov_rank="8")
    return target, root


@pytest.mark.parametrize("method, options", [("dflash", {}), ("dflash", {"top_k": "3", "budget": "6"}),
                                             ("dflash", {"verify_length": "2"}), ("dspark", {})])
def test_the_graphed_draft_drafts_what_the_eager_draft_does(graphed_setup, method, options):
    """methods/dflash/graphed.py: under cuda_graphs=on (run eagerly on the CPU) the forward and the step's device
    work as one block per context-row count emit the same tokens and accept the same drafts at every step as the
    eager draft on a static cache, and book the same drafter FLOPs, useful work and counters: greedy (the chain's
    argmax, the beam, DSpark's slots inside the block) and at T = 1 (the draws after it)."""
    target, root = graphed_setup
    prompts = [row[None] for row in next(markov_batches(48, 4, 10, seed=7))]
    for sampling in (SamplingConfig(), SamplingConfig(1.0)):
        runs = {}
        for switch in ENGINE_SWITCHES:
            adapter, _ = build_adapter(method, options, BuildInputs(target, None, root / method))
            runtime = engine_runtime(target, switch)
            runs[switch] = [generate(target, adapter, prompt, 24, sampling, runtime=runtime,
                                     generator=torch.Generator().manual_seed(seed))
                            for seed, prompt in enumerate(prompts)]
        graphs = runtime.graphs_of(adapter)
        forwards = sum(result.counters.drafter.forwards for result in runs["graph_buffers"])
        assert graphs.calls == forwards - len(prompts)  # every forward but a prompt's first ran as a block
        assert len({key[1][2] for key in graphs.graphs if key[0] == "block"}) > 1  # blocks of several row counts
        assert_drafts_as_eager(runs["static"], runs["graph_buffers"])
        assert sum(sum(result.counters.step_accepted) for result in runs["graph_buffers"]) > 0
