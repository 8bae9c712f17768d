"""The vision-language zoo: a chart's sequence is the runner's prompt (the image's placeholders first) then the
answer, the only labels; the target trains for fixed steps and saves what the runner reads (config, tokenizer,
image processor); the feature dump holds the target's own hidden states, with or without the image positions; the
study's view splits accepted drafts into image-determined and template tokens."""

import random

import torch

from harness.analysis.vlm import accepted_mask, record_split
from harness.backend.models import load_model
from harness.data.bar_charts import BarChart, random_chart, render_chart
from harness.data.images import image_inputs
from harness.training.vlm import (
    IMAGE_TOKENS, VlmShape, chart_batch, chart_ids, dump_vlm_features, image_token_id, train_vlm_draft,
    train_vlm_target,
)
from tests.helpers import build_tokenizer

TINY = VlmShape(vision_hidden=16, vision_layers=1, vision_heads=2, vision_intermediate=32, hidden_size=32,
                num_layers=2, num_heads=2, intermediate_size=64)


def test_a_charts_sequence_is_the_runners_prompt_then_the_answer():
    tokenizer = build_tokenizer(300)
    chart = BarChart((("red", 2), ("blue", 7)))
    ids, start = chart_ids(tokenizer, chart)
    image = image_token_id(tokenizer)
    assert ids[: IMAGE_TOKENS].count(image) == IMAGE_TOKENS or ids[1 : 1 + IMAGE_TOKENS] == [image] * IMAGE_TOKENS
    assert ids.count(image) == IMAGE_TOKENS and tokenizer.decode(ids[start:-1]) == chart.answer()
    batch = chart_batch(tokenizer, [chart, random_chart(random.Random(0))])
    labelled = (batch["labels"][0] >= 0).nonzero().flatten()
    assert int(labelled[0]) == start and int(labelled[-1]) == len(ids) - 1
    assert batch["pixel_values"].shape == (2, 3, 64, 64)


def test_the_target_trains_saves_and_dumps_its_features(tmp_path):
    tokenizer = build_tokenizer(300)
    metrics = train_vlm_target(tokenizer, tmp_path / "target", TINY, steps=3, batch_size=2, lr=1e-3, seed=0,
                               progress=False)
    assert metrics["train"]["steps"] == 3 and set(metrics["heldout"]) == {"all_token_accuracy", "image_token_accuracy"}
    target = load_model(str(tmp_path / "target"), "float32", "cpu")
    assert target.model.config.image_token_index == image_token_id(tokenizer)
    chart = BarChart((("green", 3), ("black", 6)))
    render_chart(chart).save(tmp_path / "chart.png")
    pixels = image_inputs(str(tmp_path / "target"), str(tmp_path / "chart.png"))["pixel_values"]
    assert torch.allclose(pixels, chart_batch(tokenizer, [chart])["pixel_values"])
    full = dump_vlm_features(target.model, tokenizer, tmp_path / "full", 4, 32, [0, 1, "last"], seed=1,
                             drop_image=False)
    text = dump_vlm_features(target.model, tokenizer, tmp_path / "text", 4, 16, ["last"], seed=1, drop_image=True)
    from safetensors.torch import load_file

    shard = load_file(str(tmp_path / "full" / "shard-00000.safetensors"))
    assert set(full["layers"]) == {"layer0", "layer1", "last"} and shard["last"].shape == (full["sequences"], 32, 32)
    first = chart_batch(tokenizer, [random_chart(random.Random(1))])
    with torch.no_grad():
        output = target.model(input_ids=first["input_ids"], pixel_values=first["pixel_values"],
                              output_hidden_states=True)
    assert torch.allclose(shard["last"][0], output.hidden_states[-1][0, :32], atol=1e-5)
    assert torch.equal(shard["input_ids"][0].long(), first["input_ids"][0, :32])
    text_ids = load_file(str(tmp_path / "text" / "shard-00000.safetensors"))["input_ids"]
    assert text["drop_image"] and not bool((text_ids == image_token_id(tokenizer)).any())
    draft = train_vlm_draft(tokenizer, tmp_path / "draft", TINY, steps=2, batch_size=2, lr=1e-3, seed=0,
                            progress=False)
    assert draft["role"] == "vlm_draft" and not (tmp_path / "draft" / "preprocessor_config.json").exists()


def test_accepted_drafts_split_into_image_determined_and_template_tokens():
    assert accepted_mask([2, 0, 1], 7) == [False, True, True, False, False, True, False]
    assert accepted_mask([3], 2) == [False, True]
    tokenizer = build_tokenizer(300)
    answer = BarChart((("red", 5), ("blue", 3))).answer()
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    everything = record_split({"output_ids": ids, "counters": {"step_accepted": [len(ids)]}}, tokenizer)
    nothing = record_split({"output_ids": ids, "counters": {"step_accepted": [0] * len(ids)}}, tokenizer)
    assert everything["image_tokens"] == nothing["image_tokens"] >= 4
    assert everything["image_accepted"] == everything["image_tokens"] and nothing["image_accepted"] == 0
    assert everything["image_tokens"] + everything["template_tokens"] == len(ids)
    assert everything["template_accepted"] == everything["template_tokens"] - 1  # the first token: the prefill's
