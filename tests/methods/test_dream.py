"""`dream`: the gated cross-attention starts as the identity and sees features of earlier slots only; the three
layers' KV cache catches up in chunks as in one pass; the recomputed attention (which image tokens stay, which layer
supervises the middle) equals transformers' own; visual-token compression keeps the text and the most attended share
of the image, with the image's own embeddings; training writes a drafter that the adapter loads, greedy == ar (the
conformance suite runs the rest: greedy on text, hybrid and vision-language targets, the sampling checks)."""

import pytest
import torch
from transformers import DynamicCache

from harness import SamplingConfig
from harness.backend.models import load_model
from harness.analysis.metrics import USEFUL_DRAFTER_FLOPS
from harness.engine.loop import generate
from harness.data.token_streams import load_tokens
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.drafters import DrafterTrainRequest
from harness.training.features import dump_features
from methods.dream import DreamOptions
from methods.dream.attention import (
    attention_candidates, attention_entropy, attention_received, entropy_mid_states, mid_candidates,
)
from methods.dream.adapter import kept_positions
from methods.dream.checkpoint import load_dream, save_dream
from methods.dream.head import new_dream_head
from methods.dream.training import DreamTrainOptions
from tests.helpers import make_bamba, make_llama, markov_batches, save_markov_target, train_test_drafter
from tests.methods.conformance.test_vlm import IMAGE_TOKEN, PATCHES, image_prompts, tiny_llava


def _inputs(length: int, width: int = 32, vocab: int = 32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(1, length, width, generator=generator), torch.randint(vocab, (1, length), generator=generator),
            torch.arange(length)[None])


@torch.no_grad()
def test_the_gates_start_closed_and_the_cross_attention_sees_earlier_slots_only():
    target = make_llama(vocab=32, hidden=32, layers=2, heads=4, seed=0)
    head = new_dream_head(target, seed=1).eval()
    features, tokens, positions = _inputs(8)
    out, mid = head(features, tokens, positions, with_mid=True)
    first = head.layers[0](head.embed_tokens(tokens), position_ids=positions,
                           position_embeddings=head.rotary_emb(features, positions))
    first = first[0] if isinstance(first, tuple) else first
    assert torch.allclose(mid, first, atol=1e-6)  # tanh(0) = 0: the cross layer adds nothing at init
    other = features.clone()
    other[:, 5:] += 3.0
    assert torch.allclose(head(features, tokens, positions), out)  # deterministic
    for gate in (head.layers[1].cross_attn_attn_gate, head.layers[1].cross_attn_mlp_gate):
        gate.fill_(0.7)
    opened, changed = head(features, tokens, positions), head(other, tokens, positions)
    assert torch.allclose(opened[:, :5], changed[:, :5], atol=1e-6)  # slot p reads features of slots <= p
    assert not torch.allclose(opened[:, 5:], changed[:, 5:], atol=1e-3)
    assert not torch.allclose(opened, out, atol=1e-3)  # opened gates: the features matter


@torch.no_grad()
def test_catching_up_in_chunks_on_the_cache_equals_one_pass():
    target = make_llama(vocab=32, hidden=32, layers=2, heads=4, seed=0)
    head = new_dream_head(target, seed=2).eval()
    for gate in (head.layers[1].cross_attn_attn_gate, head.layers[1].cross_attn_mlp_gate):
        gate.fill_(0.5)
    features, tokens, positions = _inputs(9, seed=3)
    whole = head(features, tokens, positions)
    cache = DynamicCache(config=head.config)
    parts = [head(features[:, a:b], tokens[:, a:b], positions[:, a:b], cache,
                  torch.zeros(1, 1, b - a, b).masked_fill(torch.ones(b - a, b, dtype=torch.bool).triu(a + 1),
                                                          torch.finfo(torch.float32).min) if b - a > 1 else None)
             for a, b in ((0, 4), (4, 5), (5, 9))]
    assert len(cache.layers) == 3 and cache.get_seq_length() == 9
    assert torch.allclose(torch.cat(parts, dim=1), whole, atol=1e-5)


@torch.no_grad()
def test_recomputed_attention_equals_transformers_own():
    """Entropy and attention received, from a layer's input, equal what transformers' eager attention returns; the
    middle layer's target per position is the least-entropy candidate."""
    model = make_llama(vocab=40, hidden=32, layers=4, heads=4, seed=5)
    model.set_attn_implementation("eager")
    ids = torch.randint(40, (2, 12), generator=torch.Generator().manual_seed(0))
    out = model.model(input_ids=ids, output_attentions=True, output_hidden_states=True)
    layers, rotary = model.model.layers, model.model.rotary_emb
    for index in range(4):
        theirs = out.attentions[index]
        entropy = -(theirs * torch.log(theirs + 1e-8)).sum(-1).mean(1)
        assert torch.allclose(attention_entropy(layers[index], rotary, out.hidden_states[index]), entropy, atol=1e-5)
        assert torch.allclose(attention_received(layers[index], rotary, out.hidden_states[index][0]),
                              theirs[0].mean(dim=(0, 1)), atol=1e-6)
    states = {1: out.hidden_states[1], 2: out.hidden_states[2]}
    mid = entropy_mid_states(model, states)
    entropies = torch.stack([attention_entropy(layers[i], rotary, states[i]) for i in (1, 2)])
    expected = torch.where((entropies[0] <= entropies[1])[..., None], states[1], states[2])
    assert torch.equal(mid, expected)
    assert mid_candidates(32) == list(range(1, 11)) and mid_candidates(4) == [1] and mid_candidates(16) == [1, 2, 3, 4]
    hybrid = make_bamba(layers=4, attention=(2,))
    assert attention_candidates(hybrid, [1, 2, 3]) == [2] and attention_candidates(hybrid, [1, 3]) == [1]


def test_compression_keeps_the_text_and_the_most_attended_share_of_the_image():
    prompt = torch.tensor([1, 9, 9, 9, 9, 2, 3])
    importance = torch.tensor([0.0, 0.1, 0.5, 0.2, 0.4, 0.0, 0.0])
    assert kept_positions(prompt, 9, importance, 0.5).tolist() == [0, 2, 4, 5, 6]
    assert kept_positions(prompt, 9, importance, 0.1).tolist() == [0, 2, 5, 6]  # at least one image token
    assert kept_positions(prompt, 9, importance, 1.0).tolist() == list(range(7))
    assert kept_positions(torch.tensor([1, 2]), 9, importance, 0.5).tolist() == [0, 1]
    with pytest.raises(DraftcountError, match="visual_keep"):
        parse_options(DreamOptions, {"visual_keep": "0"}, "dream")
    with pytest.raises(DraftcountError, match="token-level"):
        parse_options(DreamTrainOptions, {"objective": "gto"}, "dream training")


@pytest.fixture(scope="module")
def dream_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dream")
    save_markov_target(root, layers=3)
    metrics = train_test_drafter("dream", root, "trained", 40, heldout=True)
    return load_model(str(root / "target"), with_tokenizer=False), root, metrics


def test_a_trained_drafter_round_trips_and_drafts_losslessly(dream_setup, tmp_path):
    target, root, metrics = dream_setup
    assert metrics["mid_layers"] == [1] and len(metrics["heldout_top1_agreement_by_step"]) == 2
    head = load_dream(root / "trained", target.model)
    save_dream(head, tmp_path / "again", {})
    again = load_dream(tmp_path / "again", target.model)
    assert all(torch.equal(a, b) for a, b in zip(head.state_dict().values(), again.state_dict().values()))
    assert float(head.layers[1].cross_attn_attn_gate.detach().abs()) > 0  # training opened the gate
    with pytest.raises(DraftcountError, match="trained for method 'dream', not 'eagle'"):
        build_adapter("eagle", {}, BuildInputs(target, None, root / "trained"))
    adapter, _ = build_adapter("dream", {}, BuildInputs(target, None, root / "trained"))
    assert adapter.details["drafter_layers"] == 3 and adapter.image_token is None
    for prompt in next(markov_batches(48, 3, 10, seed=7)):
        expected = generate(target, build_adapter("ar", {}, BuildInputs(target, None, None))[0], prompt[None], 24,
                            SamplingConfig()).output_ids
        assert generate(target, adapter, prompt[None], 24, SamplingConfig()).output_ids == expected


def test_on_a_vision_language_target_the_context_keeps_the_text_and_the_top_image_tokens(dream_setup, tmp_path):
    """With an image, the drafter's context after the prefill is the text and int(64 x visual_keep) image positions,
    whose input embeddings are the image's projected features (the target's own input embeddings)."""
    _, root, _ = dream_setup
    vlm = tiny_llava()
    vlm.save_pretrained(tmp_path / "vlm")
    target = load_model(str(tmp_path / "vlm"), with_tokenizer=False)
    drafter = tmp_path / "drafter"
    save_dream(new_dream_head(target.model, seed=0), drafter, {})
    ids, media = image_prompts(1)[0]
    for keep, images in ((0.7, int(PATCHES * 0.7)), (1.0, PATCHES)):
        adapter, _ = build_adapter("dream", {"visual_keep": str(keep)}, BuildInputs(target, None, drafter))
        result = generate(target, adapter, ids, 1, SamplingConfig(), media=media)
        text = int((ids != IMAGE_TOKEN).sum())
        assert adapter.pending.shape[0] == text + images and adapter.kept_prompt.shape[0] == text + images
        kept_images = int((adapter.kept_prompt == IMAGE_TOKEN).sum())
        recomputed = result.counters.extra.get(USEFUL_DRAFTER_FLOPS, 0)  # the last layer's attention, at keep < 1
        assert kept_images == images and (recomputed > 0) == (keep < 1)
    with torch.no_grad():
        embeds = target.model.model.get_input_embeddings()(ids.clamp(max=IMAGE_TOKEN - 1))
        features = target.model.model.get_image_features(pixel_values=media["pixel_values"])
    image_rows = adapter.prompt_embeds[(adapter.kept_prompt == IMAGE_TOKEN).nonzero().flatten()]
    pooled = features.pooler_output if hasattr(features, "pooler_output") else features
    pooled = torch.cat(list(pooled)) if isinstance(pooled, (list, tuple)) else pooled.reshape(-1, image_rows.shape[-1])
    assert torch.allclose(image_rows, pooled, atol=1e-5)
    text_rows = adapter.prompt_embeds[(adapter.kept_prompt != IMAGE_TOKEN).nonzero().flatten()]
    assert torch.allclose(text_rows, embeds[0, ids[0] != IMAGE_TOKEN], atol=1e-6)


def test_a_dump_without_the_candidate_layers_trains_as_one_with_them(dream_setup):
    """The default workflow's dump holds `last` alone: the middle layer's targets are then computed by the target
    from each batch's tokens, and the drafter comes out as from a dump that holds them (float32 features)."""
    target, root, _ = dream_setup
    tokens = load_tokens(root / "tokens.pt")
    for name, layers in (("last-only", ["last"]), ("with-candidates", ["last", 1])):
        dump_features(target.model, tokens, root / f"dump-{name}", 16, 48, layers, 8, "float32", seed=0)
    heads = []
    for name in ("last-only", "with-candidates"):
        request = DrafterTrainRequest(method="dream", target=str(root / "target"), data=root / f"dump-{name}",
                                      out=root / f"dream-{name}", steps=3, progress=False,
                                      options={"seq_len": "48", "batch_size": "4", "lr": "3e-3"})
        method_spec("dream").train(request)
        heads.append(load_dream(root / f"dream-{name}", target.model).state_dict())
    assert all(torch.allclose(heads[0][key], heads[1][key], atol=1e-6) for key in heads[0])
