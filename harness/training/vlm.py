"""The vision-language zoo (issue 49): a LLaVA-style target trained on bar charts, a text-only draft LM for it, and
the image-conditioned features its drafters train on.

- ``train_vlm_target``: a random-init CLIP vision tower (64 x 64 px, patches of 8: 64 image tokens), LLaVA's
  projector and a Llama language model, trained together for a fixed number of steps (fixed seed) on
  ``harness.data.bar_charts`` (the loss on the answer's tokens only). The image placeholder is the tokenizer's last
  id, which no chart's text uses (checked), so the zoo's tokenizer serves unchanged. Saved with its tokenizer and
  its image processor (resize to 64, mean and std 0.5), so the runner reads a prompt's image as for any VLM.
- ``train_vlm_draft``: a small Llama on the same token sequences without the pixels: it learns the code around the
  values and a prior over them, never the image.
- ``dump_vlm_features``: the target's hidden states on charts it reads (with the image), packed into the feature
  dump every drafter trainer reads (``harness.training.features``); ``drop_image`` leaves the image positions out
  (HiViS trains on text positions alone).
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import (
    CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlamaForCausalLM, LlavaConfig, LlavaForConditionalGeneration,
    PreTrainedTokenizerFast,
)

from harness.data.bar_charts import (
    BarChart, PROMPT, random_chart, render_chart,
)
from harness.analysis.vlm import image_determined_spans, image_determined_tokens
from harness.data.images import with_image
from harness.data.prompts import encode_turn
from harness.data.templates import PromptFormat
from harness.errors import DraftcountError
from harness.store.atomic import atomic_path
from harness.training.features import layer_key
from harness.training.loop import TrainConfig, TrainResult, train

IMAGE_SIZE, PATCH = 64, 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2


@dataclass(frozen=True)
class VlmShape:
    """The vision tower's and the language model's sizes."""

    vision_hidden: int = 64
    vision_layers: int = 2
    vision_heads: int = 4
    vision_intermediate: int = 128
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 352
    context: int = 512


@functools.lru_cache(maxsize=1)
def image_processor() -> CLIPImageProcessor:
    """The target's image processor (one per process: every batch and dump reads through it)."""
    return CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
                              image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], do_convert_rgb=True)


def language_config(shape: VlmShape, tokenizer: PreTrainedTokenizerFast, hidden: int, layers: int, heads: int,
                    intermediate: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=intermediate,
                       num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                       max_position_embeddings=shape.context, bos_token_id=tokenizer.bos_token_id,
                       eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)


def new_vlm(shape: VlmShape, tokenizer: PreTrainedTokenizerFast, seed: int) -> LlavaForConditionalGeneration:
    vision = CLIPVisionConfig(hidden_size=shape.vision_hidden, intermediate_size=shape.vision_intermediate,
                              num_hidden_layers=shape.vision_layers, num_attention_heads=shape.vision_heads,
                              image_size=IMAGE_SIZE, patch_size=PATCH)
    text = language_config(shape, tokenizer, shape.hidden_size, shape.num_layers, shape.num_heads,
                           shape.intermediate_size)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=image_token_id(tokenizer),
                         image_seq_length=IMAGE_TOKENS, vision_feature_layer=-1,
                         vision_feature_select_strategy="default")
    torch.manual_seed(seed)
    return LlavaForConditionalGeneration(config)


def image_token_id(tokenizer: PreTrainedTokenizerFast) -> int:
    """The image placeholder: the tokenizer's last id (no chart's text tokenizes to it: ``check_image_token``)."""
    return len(tokenizer) - 1


def chart_ids(tokenizer: PreTrainedTokenizerFast, chart: BarChart) -> tuple[list[int], int]:
    """A chart's token ids as the runner builds its prompt (the image's placeholders first) followed by the answer
    and EOS, and where the answer starts."""
    prompt = encode_turn(tokenizer, [], PROMPT, PromptFormat())
    prompt = with_image(prompt, image_token_id(tokenizer), IMAGE_TOKENS, tokenizer.bos_token_id)
    answer = tokenizer(chart.answer(), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return prompt + answer, len(prompt)


def check_image_token(tokenizer: PreTrainedTokenizerFast) -> None:
    """No chart text tokenizes to the image placeholder (else the target could not tell text from image)."""
    token = image_token_id(tokenizer)
    for chart in (random_chart(random.Random(seed)) for seed in range(64)):
        ids = tokenizer(PROMPT + chart.answer(), add_special_tokens=False)["input_ids"]
        if token in ids:
            raise DraftcountError(f"token {token} (the tokenizer's last id, the image placeholder) occurs in a "
                                  f"chart's text; train the tokenizer with one more id")


def chart_batch(tokenizer: PreTrainedTokenizerFast, charts: list[BarChart], pixels: bool = True) -> dict:
    """Right-padded ids, the answer-only labels, the attention mask and (``pixels``) the images' pixel values."""
    sequences = [chart_ids(tokenizer, chart) for chart in charts]
    length = max(len(ids) for ids, _ in sequences)
    # host: the VLM zoo trains on the CPU (it has no device option), and its batches with it
    ids = torch.full((len(charts), length), tokenizer.eos_token_id)
    labels = torch.full((len(charts), length), -100)  # host: a CPU batch, as ids
    mask = torch.zeros((len(charts), length), dtype=torch.long)  # host: a CPU batch, as ids
    for row, (sequence, start) in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence)  # host: a CPU batch, as ids
        labels[row, start : len(sequence)] = torch.tensor(sequence[start:])  # host: a CPU batch, as ids
        mask[row, : len(sequence)] = 1
    batch = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    if pixels:
        batch["pixel_values"] = image_processor()(images=[render_chart(chart) for chart in charts],
                                                  return_tensors="pt")["pixel_values"]
    return batch


def step_charts(seed: int, step: int, count: int) -> list[BarChart]:
    """The charts of training step ``step``: the same on every machine for a seed."""
    rng = random.Random(seed * 1_000_003 + step)
    return [random_chart(rng) for _ in range(count)]


def heldout_charts(count: int) -> list[BarChart]:
    rng = random.Random(-1)
    return [random_chart(rng) for _ in range(count)]


def fit(model: torch.nn.Module, batch_of_step, steps: int, lr: float, seed: int, description: str,
        progress: bool) -> TrainResult:
    def loss_fn(step: int) -> tuple[torch.Tensor, int]:
        batch = batch_of_step(step)
        return model(**batch).loss, int((batch["labels"] >= 0).sum())

    config = TrainConfig(steps=steps, lr=lr, warmup_steps=min(30, max(1, steps // 10)), seed=seed,
                         checkpoint_every_s=1e9)
    return train(model, loss_fn, config, None, None, description, progress)


@torch.no_grad()
def answer_accuracy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, charts: list[BarChart],
                    pixels: bool = True) -> dict[str, float]:
    """Teacher-forced top-1 accuracy on the answers' tokens: all of them and the image-determined ones."""
    model.eval()
    batch = chart_batch(tokenizer, charts, pixels)
    labels = batch.pop("labels")
    predicted = model(**batch).logits[:, :-1].argmax(-1)
    wanted, hits = labels[:, 1:], {"all": [0, 0], "image": [0, 0]}
    for row, chart in enumerate(charts):
        answer = chart.answer()
        encoded = tokenizer(answer, add_special_tokens=False, return_offsets_mapping=True)
        image = image_determined_tokens(encoded["offset_mapping"], image_determined_spans(answer))
        positions = (wanted[row] >= 0).nonzero().flatten().tolist()[: len(image)]
        for position, is_image in zip(positions, image):
            correct = int(predicted[row, position] == wanted[row, position])
            for key in ("all", "image") if is_image else ("all",):
                hits[key][0] += correct
                hits[key][1] += 1
    model.train()
    return {f"{key}_token_accuracy": right / max(total, 1) for key, (right, total) in hits.items()}


def save_vlm(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, out: Path, metrics: dict,
             with_processor: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if with_processor:
        image_processor().save_pretrained(out)
    (out / "draftcount_model.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")


def train_vlm_target(tokenizer: PreTrainedTokenizerFast, out: Path, shape: VlmShape, steps: int, batch_size: int,
                     lr: float, seed: int, progress: bool = True) -> dict:
    """Train the VLM target on bar charts (see the module docstring); its metrics, written beside it."""
    check_image_token(tokenizer)
    model = new_vlm(shape, tokenizer, seed)
    result = fit(model, lambda step: chart_batch(tokenizer, step_charts(seed, step, batch_size)), steps, lr, seed,
                 "train vlm target", progress)
    metrics = {"role": "vlm_target", "shape": asdict(shape), "steps": steps, "batch_size": batch_size, "lr": lr,
               "seed": seed, "train": result.as_dict(),
               "heldout": answer_accuracy(model, tokenizer, heldout_charts(64))}
    save_vlm(model.eval(), tokenizer, out, metrics, with_processor=True)
    return metrics


def train_vlm_draft(tokenizer: PreTrainedTokenizerFast, out: Path, shape: VlmShape, steps: int, batch_size: int,
                    lr: float, seed: int, progress: bool = True) -> dict:
    """Train the text-only draft LM on the charts' token sequences, pixels withheld."""
    check_image_token(tokenizer)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(language_config(shape, tokenizer, shape.hidden_size, shape.num_layers, shape.num_heads,
                                             shape.intermediate_size))
    result = fit(model, lambda step: chart_batch(tokenizer, step_charts(seed, step, batch_size), pixels=False),
                 steps, lr, seed, "train vlm draft", progress)
    metrics = {"role": "vlm_draft", "shape": asdict(shape), "steps": steps, "batch_size": batch_size, "lr": lr,
               "seed": seed, "train": result.as_dict(),
               "heldout": answer_accuracy(model, tokenizer, heldout_charts(64), pixels=False)}
    save_vlm(model.eval(), tokenizer, out, metrics, with_processor=False)
    return metrics


@torch.no_grad()
def dump_vlm_features(target: LlavaForConditionalGeneration, tokenizer: PreTrainedTokenizerFast, out_dir: Path,
                      charts: int, seq_len: int, layers: list[int | str], seed: int, drop_image: bool) -> dict:
    """The target's hidden states (``layers``: 'last' or 1-based layer outputs, 0 the input embeddings) on
    ``charts`` charts read with their images, concatenated chart after chart and cut into rows of ``seq_len``:
    a feature dump as ``harness.training.features.dump_features`` writes one (``drop_image``: without the image
    positions)."""
    target.eval()
    rng = random.Random(seed)
    ids_parts: list[torch.Tensor] = []
    parts: dict[str, list[torch.Tensor]] = {layer_key(layer): [] for layer in layers}
    for _ in range(charts):
        chart = random_chart(rng)
        batch = chart_batch(tokenizer, [chart])
        output = target(input_ids=batch["input_ids"], pixel_values=batch["pixel_values"], output_hidden_states=True)
        keep = batch["input_ids"][0] != image_token_id(tokenizer) if drop_image else slice(None)
        ids_parts.append(batch["input_ids"][0, keep])
        states = output.hidden_states
        for layer in layers:
            state = states[-1] if layer == "last" else states[int(layer)]  # the last is final-normed
            parts[layer_key(layer)].append(state[0, keep].float())
    ids = torch.cat(ids_parts)
    rows = ids.shape[0] // seq_len
    if rows < 1:
        raise DraftcountError(f"{charts} charts hold {ids.shape[0]} tokens, fewer than one row of {seq_len}")
    tensors = {"input_ids": ids[: rows * seq_len].view(rows, seq_len).to(torch.int32)}
    for key, values in parts.items():
        stacked = torch.cat(values)
        tensors[key] = stacked[: rows * seq_len].view(rows, seq_len, -1).contiguous()
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_dir / "shard-00000.safetensors") as partial:
        save_file(tensors, str(partial))
    width = int(target.config.text_config.hidden_size)
    index = {"shards": ["shard-00000.safetensors"], "layers": list(parts), "sequences": rows, "seq_len": seq_len,
             "dtype": "float32", "hidden_size": width, "bytes": rows * seq_len * (width * len(parts) * 4 + 4),
             "charts": charts, "drop_image": drop_image}
    (out_dir / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    return index
