"""Released EAGLE heads load and run as released: random-weight heads in the official EAGLE-3 and EAGLE-1/2
layouts (LLaMA-3, Vicuna, Qwen2; .bin and .safetensors) give the official forward's draft logits (restated in
``eagle_reference``), keep `ar`'s greedy output, and a malformed head stops with one line."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import DynamicCache

from harness import SamplingConfig
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.training.features import default_fusion_layers, feature_indices
from harness import wrap_model
from methods.eagle.checkpoint import load_head
from methods.eagle.head3 import Eagle3Head
from tests.helpers import make_llama
from tests.methods import eagle_reference as ref

VOCAB, HIDDEN, HEADS, KV_HEADS, LAYERS = 40, 32, 4, 2, 8
LAYOUTS = {  # name: (kind, weight file, embedding in the checkpoint)
    "eagle3": ("eagle3", "pytorch_model.bin", False),
    "eagle3_safetensors": ("eagle3", "model.safetensors", False),
    "llama3": ("llama3", "pytorch_model.bin", False),
    "vicuna": ("vicuna", "pytorch_model.bin", True),
    "vicuna_safetensors": ("vicuna", "model.safetensors", True),
    "qwen2": ("qwen2", "pytorch_model.bin", False),
}


@pytest.fixture(scope="module")
def target():
    model = make_llama(vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, heads=HEADS, seed=4, init_range=0.3)
    return wrap_model(model)


def write_head(directory: Path, name: str, seed: int = 0) -> tuple[dict, dict]:
    kind, weight_file, with_embedding = LAYOUTS[name]
    config = ref.official_config(kind, HIDDEN, HEADS, KV_HEADS, VOCAB, draft_vocab=24 if kind == "eagle3" else 0)
    state = ref.official_state(kind, config, HIDDEN, seed, with_embedding)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    if weight_file.endswith(".bin"):
        torch.save(state, directory / weight_file)
    else:
        save_file({key: value.contiguous() for key, value in state.items()}, str(directory / weight_file))
    return config, state


def target_rows(target, tokens: torch.Tensor, layers: tuple) -> list[torch.Tensor]:
    with torch.no_grad():
        out = target.model.model(input_ids=tokens, output_hidden_states=True)
    return [out.last_hidden_state if layer == "last" else out.hidden_states[layer] for layer in layers]


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_draft_logits_equal_the_official_forward(target, tmp_path, name):
    config, state = write_head(tmp_path / name, name)
    head = load_head(tmp_path / name, target.model)
    kind = LAYOUTS[name][0]
    assert isinstance(head, Eagle3Head) == (kind == "eagle3")
    embedding = state.get("embed_tokens.weight", target.model.get_input_embeddings().weight.detach())
    lm_head = target.model.get_output_embeddings()
    tokens = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(1))
    layers = head.features.layers
    if kind == "eagle3":
        assert layers == (2, LAYERS // 2, LAYERS - 3)  # EAGLE-3's choice, not ours
    rows = target_rows(target, tokens, layers)
    features = torch.cat(rows, dim=-1)[:, :-1]
    pairs = tokens[:, 1:]
    positions = torch.arange(11)
    official = ref.eagle3_forward if kind == "eagle3" else ref.eagle12_forward
    # the catch-up forward over 8 pairs (causal), then a tree step: 3 nodes at depth 1 under the last pair
    with torch.no_grad():
        expected, past = official(state, config, features[:, :8], pairs[:, :8], embedding, positions[:8],
                                  ref.causal_mask(8, 0))
        cache = DynamicCache(config=head.config)
        ours = head(head.input_features([row[:, :-1][:, :8] for row in rows]), pairs[:, :8], positions[None, :8], cache,
                    ref.causal_mask(8, 0)[None, None])
        node_features = expected[:, -1:].expand(1, 3, -1)
        node_tokens = torch.tensor([[5, 9, 13]])
        tree_mask = torch.cat([torch.zeros(3, 8), torch.full((3, 3), torch.finfo(torch.float32).min)], dim=1)
        tree_mask[:, 8:].fill_diagonal_(0)
        expected_nodes, _ = official(state, config, node_features, node_tokens, embedding, torch.full((3,), 8),
                                     tree_mask, past)
        ours_nodes = head(ours[:, -1:].expand(1, 3, -1), node_tokens, torch.full((1, 3), 8), cache,
                          tree_mask[None, None])
    if kind == "eagle3":
        expected_logits = ref.eagle3_logits(state, config, torch.cat([expected, expected_nodes], dim=1))
    else:
        expected_logits = lm_head(torch.cat([expected, expected_nodes], dim=1))
    ours_logits = head.draft_vocab.target_logits(head.logits(torch.cat([ours, ours_nodes], dim=1), lm_head))
    finite = torch.isfinite(expected_logits)
    assert torch.equal(finite, torch.isfinite(ours_logits))
    assert (ours_logits[finite] - expected_logits[finite]).abs().max() < 1e-5
    if kind == "eagle3":  # the draft vocabulary's 24 tokens, at the target ids d2t names
        assert int(finite[0, 0].sum()) == 24
        assert torch.equal(finite[0, 0].nonzero().flatten(), torch.nonzero(state["t2d"]).flatten())


@pytest.mark.parametrize("name", ["eagle3", "llama3", "vicuna", "qwen2"])
def test_released_heads_keep_ar_greedy_output(target, tmp_path, name):
    write_head(tmp_path / name, name, seed=3)
    adapter, _ = build_adapter("eagle", {"top_k": 3, "depth": 3, "budget": 8},
                               BuildInputs(target, None, tmp_path / name))
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    assert feature_indices(adapter.head.features)  # the hidden states the engine hands the head
    for seed in range(3):
        prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(seed))
        expected = generate(target, ar, prompt, 20, SamplingConfig()).output_ids
        assert generate(target, adapter, prompt, 20, SamplingConfig()).output_ids == expected


def one_line_error(target, directory: Path) -> str:
    with pytest.raises(DraftcountError) as caught:
        load_head(directory, target.model)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_malformed_heads_stop_with_one_line(target, tmp_path):
    write_head(tmp_path / "missing", "eagle3")
    state = torch.load(tmp_path / "missing" / "pytorch_model.bin", weights_only=True)
    del state["midlayer.hidden_norm.weight"]
    state["midlayer.extra.weight"] = torch.zeros(2)
    torch.save(state, tmp_path / "missing" / "pytorch_model.bin")
    message = one_line_error(target, tmp_path / "missing")
    assert "missing weights midlayer.hidden_norm.weight" in message and "unexpected weights midlayer.extra.weight" in message

    write_head(tmp_path / "shape", "llama3")
    state = torch.load(tmp_path / "shape" / "pytorch_model.bin", weights_only=True)
    state["fc.weight"] = torch.zeros(HIDDEN, 3 * HIDDEN)
    torch.save(state, tmp_path / "shape" / "pytorch_model.bin")
    assert "fc.weight (32, 96) (expected (32, 64))" in one_line_error(target, tmp_path / "shape")

    write_head(tmp_path / "other", "vicuna")
    torch.save({"transformer.h.0.weight": torch.zeros(2)}, tmp_path / "other" / "pytorch_model.bin")
    assert "not an EAGLE head" in one_line_error(target, tmp_path / "other")

    write_head(tmp_path / "config", "vicuna")
    config = json.loads((tmp_path / "config" / "config.json").read_text())
    del config["intermediate_size"]
    (tmp_path / "config" / "config.json").write_text(json.dumps(config))
    assert "config.json lacks intermediate_size" in one_line_error(target, tmp_path / "config")

    write_head(tmp_path / "vocab", "eagle3")
    config = json.loads((tmp_path / "vocab" / "config.json").read_text())
    config["vocab_size"] = 64
    (tmp_path / "vocab" / "config.json").write_text(json.dumps(config))
    assert "64-token vocabulary" in one_line_error(target, tmp_path / "vocab")

    assert "does not exist" in one_line_error(target, tmp_path / "nowhere" / "head")


def test_hub_id_drafter_offline_is_one_line(target, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    message = one_line_error(target, Path("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"))
    assert "not in the local hub cache" in message and "offline" in message


def test_fetching_a_hub_id_offline_is_one_line(monkeypatch, tmp_path, capsys):
    from harness.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert main(["fetch", "meta-llama/Llama-3.1-8B-Instruct", "--out", str(tmp_path / "hub")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "not in the local hub cache" in error


def test_eagle3_feature_layers_follow_eagle3():
    assert default_fusion_layers(32) == (2, 16, 29)  # Llama-3.1-8B: inputs of layers 2, 16, 29
    assert default_fusion_layers(80) == (2, 40, 77)
    assert len(set(default_fusion_layers(4))) == 3


@pytest.mark.skipif(not os.environ.get("EAGLE_REPO"), reason="set EAGLE_REPO to a checkout of SafeAILab/EAGLE")
def test_against_the_official_code(target, tmp_path):
    """With the EAGLE authors' code at hand, their Model.forward gives our logits (EAGLE-3 and EAGLE-1/2)."""
    sys.path.insert(0, os.environ["EAGLE_REPO"])
    from eagle.model import cnets, cnets1
    from eagle.model.configs import EConfig

    for name, module in (("eagle3", cnets), ("llama3", cnets1)):
        config, state = write_head(tmp_path / name, name, seed=5)
        head = load_head(tmp_path / name, target.model)
        econfig = EConfig.from_pretrained(tmp_path / name)
        econfig.rope_scaling, econfig.rope_theta = None, config["rope_theta"]  # transformers 5 fills rope_scaling in
        official = module.Model(econfig, bias=False).eval()
        official.load_state_dict({**state, "embed_tokens.weight": target.model.get_input_embeddings().weight.detach()},
                                 strict=False)
        tokens = torch.randint(0, VOCAB, (1, 10), generator=torch.Generator().manual_seed(2))
        rows = target_rows(target, tokens, head.features.layers)
        with torch.no_grad():
            theirs = official(torch.cat(rows, dim=-1)[:, :-1] if name == "eagle3" else rows[0][:, :-1],
                              input_ids=tokens[:, 1:])
            ours = head(head.input_features([row[:, :-1] for row in rows]), tokens[:, 1:], torch.arange(9)[None],
                        None, ref.causal_mask(9, 0)[None, None])
        assert (theirs - ours).abs().max() < 1e-5
