"""Zoo building blocks: corpus split, tokenizer, token streams, features, code prompts, metrics."""

import json

import pytest
import torch
from transformers import AutoTokenizer

from harness.data.code_prompts import make_code_prompts
from harness.data.corpus import Document, build_stdlib_corpus, collect_python_files, load_documents
from harness.training.features import FeatureSource, dump_features, early_features, target_features
from harness.data.token_streams import even_windows, random_windows, tokenize_documents
from harness.training.zoo import ModelShape, new_model, repetition_rate, save_model, train_tokenizer

SOURCE = '''import os


class Thing:
    """A thing."""

    def __init__(self, value):
        self.value = value

    def double(self):
        return self.value * 2


def helper(path):
    return os.path.join(path, "x")
'''


@pytest.fixture(scope="module")
def fake_stdlib(tmp_path_factory):
    root = tmp_path_factory.mktemp("stdlib")
    for index in range(40):
        (root / f"mod{index}.py").write_text(SOURCE.replace("Thing", f"Thing{index}"))
    (root / "test").mkdir()
    (root / "test" / "test_mod.py").write_text("def test_x():\n    assert True\n")
    (root / "site-packages").mkdir()
    (root / "site-packages" / "third.py").write_text("x = 1\n")
    return root


def test_corpus_split_is_deterministic_and_excludes_tests(fake_stdlib, tmp_path):
    files = collect_python_files(fake_stdlib, include_tests=False)
    assert len(files) == 40 and all("test" not in str(f) and "site-packages" not in str(f) for f in files)
    assert len(collect_python_files(fake_stdlib, include_tests=True)) == 41
    first = build_stdlib_corpus(tmp_path / "a", False, 0.2, seed=0, root=fake_stdlib)
    second = build_stdlib_corpus(tmp_path / "b", False, 0.2, seed=0, root=fake_stdlib)
    assert first["splits"] == second["splits"]
    assert first["splits"]["train"]["files"] + first["splits"]["heldout"]["files"] == 40
    train = {doc.path for doc in load_documents(tmp_path / "a" / "train.jsonl")}
    heldout = {doc.path for doc in load_documents(tmp_path / "a" / "heldout.jsonl")}
    assert train and heldout and not train & heldout
    assert json.loads((tmp_path / "a" / "corpus.json").read_text())["splits"]["train"]["sha256"]



def test_a_capped_train_split_samples_whole_documents_across_the_library(fake_stdlib, tmp_path):
    full = build_stdlib_corpus(tmp_path / "full", False, 0.2, seed=0, root=fake_stdlib)
    cap = full["splits"]["train"]["bytes"] // 2
    capped = build_stdlib_corpus(tmp_path / "capped", False, 0.2, seed=0, root=fake_stdlib, max_train_bytes=cap)
    assert capped["splits"]["heldout"] == full["splits"]["heldout"]  # the held-out split is never cut
    assert 0 < capped["splits"]["train"]["bytes"] <= cap and capped["max_train_bytes"] == cap
    kept = [doc.path for doc in load_documents(tmp_path / "capped" / "train.jsonl")]
    every = [doc.path for doc in load_documents(tmp_path / "full" / "train.jsonl")]
    assert kept == [path for path in every if path in set(kept)]  # whole documents, in the split's order
    assert kept != every[: len(kept)]  # drawn across the library, not its first files
    again = build_stdlib_corpus(tmp_path / "again", False, 0.2, seed=0, root=fake_stdlib, max_train_bytes=cap)
    assert again["splits"] == capped["splits"]
    assert "max_train_bytes" not in full

@pytest.fixture(scope="module")
def zoo_tokenizer(fake_stdlib, tmp_path_factory):
    documents = [Document(p.name, p.read_text()) for p in sorted(fake_stdlib.glob("*.py"))]
    out = tmp_path_factory.mktemp("tok") / "tokenizer"
    train_tokenizer(documents, vocab_size=400, out_dir=out, max_bytes=100_000)
    return AutoTokenizer.from_pretrained(out), documents


def test_tokenizer_round_trip_and_special_tokens(zoo_tokenizer):
    tokenizer, documents = zoo_tokenizer
    assert 258 < len(tokenizer) <= 400  # a tiny corpus may run out of merges
    ids = tokenizer("    def double(self):\n")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "    def double(self):\n"
    stream = tokenize_documents(tokenizer, documents[:3])
    assert int((stream == tokenizer.eos_token_id).sum()) == 3 and stream[0] == tokenizer.bos_token_id


def test_saved_model_loads_in_a_fresh_process(zoo_tokenizer, tmp_path):
    import subprocess
    import sys

    tokenizer, _ = zoo_tokenizer
    model = new_model(ModelShape(32, 1, 2, 64, 128), tokenizer, seed=0)
    save_model(tmp_path / "m", model, tokenizer, {"kind": "test"})
    assert not (tmp_path / "m.partial").exists()
    code = ("from transformers import AutoModelForCausalLM, AutoTokenizer; import sys; "
            f"m = AutoModelForCausalLM.from_pretrained('{tmp_path / 'm'}'); t = AutoTokenizer.from_pretrained('{tmp_path / 'm'}'); "
            "assert m.config.eos_token_id == t.eos_token_id; print(type(m).__name__, len(t))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"LlamaForCausalLM {len(tokenizer)}" in result.stdout
    assert json.loads((tmp_path / "m" / "draftcount.json").read_text())["kind"] == "test"


def test_windows():
    tokens = torch.arange(100, dtype=torch.int32)
    windows = random_windows(tokens, 4, 10, torch.Generator().manual_seed(0))
    assert windows.shape == (4, 10) and (windows[:, 1:] - windows[:, :-1] == 1).all()
    even = even_windows(tokens, 3, 10)
    assert even[0, 0] == 0 and even[-1, -1] == 99


def test_features_dump_matches_on_the_fly(tmp_path):
    torch.manual_seed(0)
    from tests.helpers import make_llama

    model = make_llama(vocab=50, hidden=16, layers=2, heads=2)
    tokens = torch.randint(0, 50, (2000,), dtype=torch.int32)
    index = dump_features(model, tokens, tmp_path / "f", sequences=6, seq_len=12, layers=["last", 1], shard_size=4,
                          dtype="float32", seed=0)
    assert index["shards"] == ["shard-00000.safetensors", "shard-00001.safetensors"] and index["layers"] == ["last", "layer1"]
    dumped = FeatureSource(["last", 1], 12, dump_dir=tmp_path / "f").batch(3, torch.Generator().manual_seed(1))
    recomputed = target_features(model, dumped["input_ids"], ["last", 1])
    torch.testing.assert_close(dumped["last"], recomputed["last"])
    torch.testing.assert_close(dumped["layer1"], recomputed["layer1"])
    torch.testing.assert_close(recomputed["last"], model.model(dumped["input_ids"]).last_hidden_state)
    live = FeatureSource(["last"], 12, target=model, tokens=tokens).batch(2, torch.Generator().manual_seed(1))
    assert live["last"].shape == (2, 12, 16)
    only_last = FeatureSource(["last"], 12, dump_dir=tmp_path / "f").batch(3, torch.Generator().manual_seed(1))
    assert set(only_last) == {"input_ids", "last"}  # a dump holding more layers serves the asked ones alone
    torch.testing.assert_close(only_last["last"], dumped["last"])


@pytest.mark.parametrize("family", ["llama", "bamba"])
def test_features_below_the_top_stop_the_forward_early_with_the_same_states(family):
    """Layers below the top without 'last' come from a forward stopped at the deepest of them: the full forward's
    states bit for bit (a text target and a hybrid one), and the deeper layers never run."""
    from tests.helpers import make_bamba, make_llama

    model = (make_llama(vocab=50, hidden=16, layers=4, heads=2) if family == "llama" else make_bamba(vocab=50)).eval()
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0))
    full = model.base_model(input_ids=ids, output_hidden_states=True).hidden_states
    depth = len(full) - 1
    ran = []
    hooks = [layer.register_forward_hook(lambda module, args, out, index=index: ran.append(index))
             for index, layer in enumerate(model.base_model.layers)]
    for layers in ([1], [0, 2], [depth - 1], [2, 1]):
        ran.clear()
        early = target_features(model, ids, layers)
        assert ran == list(range(max(layers)))  # the layers below the deepest asked for, and no more
        assert all(torch.equal(early[f"layer{layer}"], full[layer]) for layer in layers)
    for hook in hooks:
        hook.remove()
    assert early_features(model, ids, [depth]) is None and early_features(model, ids, ["last", 1]) is None
    torch.testing.assert_close(target_features(model, ids, [depth, "last"])["last"],
                               model.base_model(input_ids=ids).last_hidden_state)


def test_code_prompts_end_at_a_header():
    documents = [Document(f"m{i}.py", SOURCE) for i in range(3)]
    prompts = make_code_prompts(documents, count=4, lines=5, seed=0)
    assert len(prompts) == 4
    for prompt in prompts:
        last = prompt["prompt"].rstrip("\n").splitlines()[-1].lstrip()
        assert last.startswith(("def ", "class ")) and last.endswith(":")
        assert len(prompt["prompt"].splitlines()) == 5


def test_repetition_rate():
    assert repetition_rate(list(range(20))) == 0.0
    assert repetition_rate([1, 2] * 20) > 0.9


def test_grow_depth_keeps_the_function_and_adds_real_layers():
    from harness.training.zoo import grow_depth
    from tests.helpers import make_llama

    base = make_llama(vocab=40, hidden=32, layers=2, heads=4, seed=0).eval()
    grown = grow_depth(base, 6, seed=1).eval()
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(base(ids).logits, grown(ids).logits)  # new layers add exactly nothing yet
    assert grown.config.num_hidden_layers == 6 and len(grown.model.layers) == 6
    assert torch.equal(grown.model.layers[3].self_attn.q_proj.weight, base.model.layers[1].self_attn.q_proj.weight)
    new = grown.model.layers[1]
    assert new.self_attn.q_proj.weight.abs().sum() > 0 and new.mlp.down_proj.weight.abs().sum() == 0
    grown.train()
    grown(input_ids=ids, labels=ids).loss.backward()  # trainable: the zero projections get gradients
    assert new.mlp.down_proj.weight.grad.abs().sum() > 0
    with pytest.raises(Exception, match="multiple of the base"):
        grow_depth(base, 5, seed=1)


def test_a_bamba_shape_builds_a_hybrid_and_a_mamba2_lm_that_train_and_reload(zoo_tokenizer, tmp_path):
    """``architecture: bamba`` (workflow/config/hybrid.yaml): Mamba2 layers with attention where asked (none: STree's
    Mamba2 drafter); both train (transformers' own cache off: it fails a Mamba2 LM) and reload as Bamba."""
    from transformers import AutoModelForCausalLM

    from harness.errors import DraftcountError
    from harness.training.zoo import next_token_loss
    from harness.training.zoo_training import model_shape

    tokenizer, _ = zoo_tokenizer
    for attention in ([1], []):
        shape = model_shape({"architecture": "bamba", "hidden_size": 32, "num_layers": 2, "num_heads": 4,
                             "intermediate_size": 64, "context": 128, "attention_layers": attention,
                             "mamba_head_dim": 16, "mamba_state": 8})
        model = new_model(shape, tokenizer, seed=0)
        assert model.config.layers_block_type == ["linear_attention", "full_attention" if attention else
                                                  "linear_attention"]
        windows = torch.randint(0, len(tokenizer), (2, 16), generator=torch.Generator().manual_seed(0))
        next_token_loss(model, windows).backward()
        save_model(tmp_path / f"m{len(attention)}", model, tokenizer, {"kind": "test"})
        assert type(AutoModelForCausalLM.from_pretrained(tmp_path / f"m{len(attention)}")).__name__ == "BambaForCausalLM"
    with pytest.raises(DraftcountError, match="attention layers \\[3\\] must lie in 0..1"):
        new_model(ModelShape(32, 2, 4, 64, 128, architecture="bamba", attention_layers=(3,)), tokenizer, seed=0)
