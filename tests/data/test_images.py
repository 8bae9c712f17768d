"""Prompts with an image for a vision-language target (harness.data.images, the runner): the prompt file names the
image, the runner prefills it through the target's own image processor with its placeholder tokens first, and every
record names the image it read; a text target or a missing file stops with one line."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image
from transformers import CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

from harness.data.images import image_record, with_image
from harness.data.prompts import load_prompts
from harness.errors import DraftcountError
from harness.runner import RunConfig, run
from tests.helpers import build_tokenizer

PATCHES = 64  # a 64 x 64 image in patches of 8


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    """A tiny random LLaVA saved with the zoo-style tokenizer (plus an image token) and a CLIP image processor."""
    root = tmp_path_factory.mktemp("vlm")
    tokenizer = build_tokenizer()
    image_token = len(tokenizer)
    text = LlamaConfig(vocab_size=image_token + 1, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, max_position_embeddings=512, tie_word_embeddings=False,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=None)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                              image_size=64, patch_size=8)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=image_token,
                         image_seq_length=PATCHES, vision_feature_layer=-1, vision_feature_select_strategy="default")
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(config)
    model.generation_config.eos_token_id = None
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    CLIPImageProcessor(size={"shortest_edge": 64}, crop_size={"height": 64, "width": 64}).save_pretrained(root)
    return root


def prompt_file(folder, images: dict[str, str]):
    generator = torch.Generator().manual_seed(0)
    for name in set(images.values()):
        pixels = torch.randint(0, 256, (64, 64, 3), generator=generator, dtype=torch.uint8).numpy()
        Image.fromarray(pixels).save(folder / name)
    path = folder / "questions.jsonl"
    path.write_text("".join(json.dumps({"question_id": key, "category": "table", "turns": ["values = {"],
                                        "image": name}) + "\n" for key, name in images.items()))
    return path


def test_records_name_the_image_and_the_method_equals_ar(vlm_dir, tmp_path):
    prompts = prompt_file(tmp_path, {"q0": "a.png", "q1": "b.png"})
    assert load_prompts(str(prompts))[0].image == str(tmp_path / "a.png")
    out = tmp_path / "run.jsonl"
    run(RunConfig(method="pld", target=str(vlm_dir), prompts=str(prompts), out=out, pair_with_ar=True,
                  max_new_tokens=8, warmup=1), progress=False)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 4
    for record in records:
        image = "a.png" if record["prompt_id"] == "q0" else "b.png"
        assert record["image"] == image_record(str(tmp_path / image))
        assert record["prompt_tokens"] > PATCHES
    by_role = {(record["prompt_id"], record["role"]): record["output_ids"] for record in records}
    assert by_role["q0", "method"] == by_role["q0", "baseline"] and by_role["q1", "method"] == by_role["q1", "baseline"]


def test_an_image_needs_a_vision_language_target_and_an_existing_file(vlm_dir, model_dirs, tmp_path):
    prompts = prompt_file(tmp_path, {"q0": "a.png"})
    with pytest.raises(DraftcountError, match="needs a vision-language target"):
        run(RunConfig(method="ar", target=str(model_dirs["target"]), prompts=str(prompts), out=tmp_path / "x.jsonl",
                      max_new_tokens=4, warmup=0), progress=False)
    (tmp_path / "a.png").unlink()
    with pytest.raises(DraftcountError, match="a.png does not exist"):
        run(RunConfig(method="ar", target=str(vlm_dir), prompts=str(prompts), out=tmp_path / "y.jsonl",
                      max_new_tokens=4, warmup=0), progress=False)


def test_the_placeholders_go_first_after_bos():
    assert with_image([7, 1, 2], 9, 3, bos=7) == [7, 9, 9, 9, 1, 2]
    assert with_image([1, 2], 9, 2, bos=7) == [9, 9, 1, 2]
