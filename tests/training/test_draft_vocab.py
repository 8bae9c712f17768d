"""The shared draft vocabulary (``harness.training.draft_vocab``): its choice from training tokens (frequency order,
the target's end-of-sequence tokens always in, deterministic), its maps (EAGLE-3's d2t/t2d, written and read back
with a drafter, checked against the target's vocabulary), its logits (the target LM head's rows, gathered once) and
a drafter trained with it, which drafts only tokens of its map."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from harness import SamplingConfig, generate
from harness.backend.models import load_model
from harness.data.token_streams import save_tokens
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.training.draft_vocab import DraftVocab, choose_draft_vocab, frequent_tokens, vocab_from_maps
from harness.training.drafters import DrafterTrainRequest, read_drafter, write_drafter
from harness.training.features import FeatureSource
from harness.backend.models import wrap_model
from methods.eagle.training import train_eagle
from tests.helpers import make_llama, markov_batches, markov_llama, record_drafts


def test_the_most_frequent_tokens_with_the_specials_sorted_by_id():
    stream = torch.tensor([5] * 9 + [3] * 7 + [8] * 7 + [1] * 2 + [0] * 1 + [6] * 7)
    # counts: 5 -> 9; 3, 6, 8 -> 7 (ties: the lower id first); 1 -> 2; 0 -> 1; special 9 never seen
    assert frequent_tokens(stream, 10, 3).tolist() == [3, 5, 6]
    assert frequent_tokens(stream, 10, 4, specials=[9]).tolist() == [3, 5, 6, 9]
    assert frequent_tokens(stream, 10, 5, specials=[9, 9]).tolist() == [3, 5, 6, 8, 9]
    assert frequent_tokens(stream.flip(0), 10, 4, specials=[9]).tolist() == [3, 5, 6, 9]  # the order plays no part
    assert frequent_tokens(stream, 10, 10).tolist() == list(range(10))
    for size, specials, match in ((0, [], "1..10"), (11, [], "1..10"), (1, [2, 3], "cannot hold"),
                                  (2, [10], "cannot hold")):
        with pytest.raises(DraftcountError, match=match):
            frequent_tokens(stream, 10, size, specials)
    with pytest.raises(DraftcountError, match="outside the target's vocabulary"):
        frequent_tokens(torch.tensor([1, 12]), 10, 2)


def test_maps_logits_and_scatter_follow_eagle3s_convention():
    vocab = DraftVocab(10, torch.tensor([1, 4, 5, 9]))
    maps = vocab.maps()
    assert maps["d2t"].tolist() == [1, 3, 3, 6] and maps["t2d"].nonzero().flatten().tolist() == [1, 4, 5, 9]
    assert (torch.arange(4) + maps["d2t"]).tolist() == [1, 4, 5, 9]  # draft index d is target token d + d2t[d]
    head = nn.Linear(6, 10, bias=True)
    hidden = torch.randn(3, 6)
    logits = vocab.logits(hidden, head)
    assert logits.shape == (3, 4) and torch.allclose(logits, head(hidden)[:, [1, 4, 5, 9]])
    assert logits.requires_grad and vocab.rows(head.weight)[0] is not vocab.rows(head.weight)[0]  # a trained head
    with torch.no_grad():  # a frozen one (a target's, or any at inference): gathered once
        assert vocab.rows(head.weight, head.bias)[0] is vocab.rows(head.weight, head.bias)[0]
    with torch.inference_mode():
        assert vocab.rows(head.weight, head.bias)[0] is vocab.rows(head.weight, head.bias)[0]
    head.requires_grad_(False)
    assert vocab.rows(head.weight, head.bias)[0] is vocab.rows(head.weight, head.bias)[0]
    with torch.no_grad():
        head.weight.mul_(2)  # the head changed: gathered again
    assert torch.allclose(vocab.logits(hidden, head), head(hidden)[:, [1, 4, 5, 9]])
    assert vocab.to_target(torch.tensor([0, 3])).tolist() == [1, 9]
    full = vocab.target_logits(logits)
    assert torch.equal(torch.isfinite(full[0]), maps["t2d"]) and torch.equal(vocab.restrict(full), logits)
    assert vocab.target_probs(logits.softmax(-1)).sum(-1).allclose(torch.ones(3))
    assert vocab.head_params(10 * 6) == 4 * 6 and vocab.coverage(torch.tensor([1, 2, 4, 4])) == 0.75
    whole = DraftVocab(10)
    assert torch.equal(whole.logits(hidden, head), head(hidden)) and whole.token_map is None and whole.size == 10
    assert whole.target_logits(logits) is logits and whole.to_target(torch.tensor([7])).tolist() == [7]


def test_maps_read_back_and_are_checked_against_the_target(tmp_path):
    vocab = DraftVocab(10, torch.tensor([1, 4, 5, 9]))
    write_drafter(tmp_path / "d", "eagle", {"w": torch.zeros(2)}, {}, vocab=vocab)
    files = read_drafter(tmp_path / "d", "eagle", with_config=False)
    assert set(files.state) == {"w"} and files.meta["draft_vocab"] == 4
    assert torch.equal(files.draft_vocab(10, "x").ids, vocab.ids)
    write_drafter(tmp_path / "full", "eagle", {"w": torch.zeros(2)}, {}, vocab=DraftVocab(10))
    assert not read_drafter(tmp_path / "full", "eagle", with_config=False).maps  # the full vocabulary: no map
    assert not vocab_from_maps(DraftVocab(10).maps(), 10, "x").reduced  # the identity maps: the full vocabulary
    for maps, match in ((vocab.maps(), "maps a 10-token vocabulary; the target has 12"),
                        ({"d2t": vocab.maps()["d2t"]}, "needs both d2t and t2d"),
                        ({**vocab.maps(), "d2t": torch.tensor([1, 3, 3, 5])}, "maps disagree")):
        with pytest.raises(DraftcountError, match=match) as caught:
            vocab_from_maps(maps, 12 if "12" in match else 10, "drafter x")
        assert "\n" not in str(caught.value)


def test_the_choice_reads_the_training_stream_and_keeps_the_targets_eos():
    model = make_llama(vocab=12, hidden=16, layers=1, heads=2)
    model.config.eos_token_id = 11  # emitted by the target, never in the stream
    stream = torch.tensor([2, 2, 2, 3, 3, 7] * 5)
    source = FeatureSource(layers=["last"], seq_len=4, target=model, tokens=stream)
    assert choose_draft_vocab(3, source, wrap_model(model)).ids.tolist() == [2, 3, 11]
    assert not choose_draft_vocab(0, source, wrap_model(model)).reduced


@pytest.fixture(scope="module")
def markov_target(tmp_path_factory):
    root = tmp_path_factory.mktemp("draft-vocab")
    markov_llama().save_pretrained(root / "target")
    batches = markov_batches(48, 32, 48, seed=5)
    save_tokens(root / "tokens.pt", torch.cat([next(batches).flatten() for _ in range(2)]))
    return root


def test_a_drafter_trains_over_its_map_and_drafts_only_inside_it(markov_target):
    root = markov_target
    options = {"seq_len": "48", "batch_size": "8", "lr": "3e-3", "draft_vocab": "20"}
    request = DrafterTrainRequest(method="eagle", target=str(root / "target"), data=root / "tokens.pt",
                                  out=root / "eagle-vocab", steps=40, progress=False, heldout=root / "tokens.pt",
                                  options=options)
    metrics = train_eagle(request)
    assert metrics["draft_vocab"] == 20 and metrics["target_vocab"] == 48
    assert metrics["train"]["losses"][-1] < metrics["train"]["losses"][0]
    assert 0.4 < metrics["heldout_vocabulary_coverage"] <= 1.0
    target = load_model(str(root / "target"), with_tokenizer=False)
    adapter, _ = build_adapter("eagle", {}, BuildInputs(target, None, root / "eagle-vocab"))
    kept = set(adapter.head.draft_vocab.ids.tolist())
    assert len(kept) == 20 and adapter.details["draft_vocab"] == 20
    drafted = record_drafts(adapter)
    for seed, sampling in enumerate([SamplingConfig(), SamplingConfig(1.0)]):
        prompt = next(markov_batches(48, 1, 10, seed=11 + seed))
        generate(target, adapter, prompt, 24, sampling, generator=torch.Generator().manual_seed(seed))
    assert drafted and set(drafted) <= kept
    assert adapter.runner.cost.head_params == 20 * target.config.hidden_size  # the cost charges the reduced head
    with pytest.raises(DraftcountError, match="cannot change that"):
        train_eagle(DrafterTrainRequest(method="eagle", target=str(root / "target"), data=root / "tokens.pt",
                                        out=root / "x", steps=0, progress=False,
                                        options={**options, "draft_vocab": "10", "init": str(root / "eagle-vocab")}))
