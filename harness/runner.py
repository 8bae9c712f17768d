"""One benchmark run: one method (optionally paired with `ar`) over one prompt set, to a JSONL file.

With pairing, `ar` and the method generate every turn in the same process on
the same prompt with the same seed, alternating which goes first, so speedups
are paired per-prompt ratios measured under the same conditions.

How closely they are interleaved (``interleave``): ``step`` (the default on a
host-only device) runs the two generations of a turn in turns, one decoding
step of each, each timing only its own steps (``run_interleaved``): a shared,
noisy machine slows both alike, so their ratio keeps only what the methods do.
``turn`` (the default on CUDA, whose timing is event-based and quiet) runs one
whole generation, then the other. On a 2-core VM, two identical `ar`
generations timed one after the other differed by up to 25%; step by step, see
docs/engine.md (Timing).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import torch
from tqdm import tqdm

from harness.engine.adapter import WARM_UP_KEY, DraftAdapter
from harness.verify import DEFAULT_VERIFIER, get_verifier
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.engine.loop import Generation, generation_steps, run_interleaved
from harness.errors import DraftcountError
from harness.backend.models import LoadedModel, eos_token_ids, load_model, model_location
from harness.options import options_as_dict
from harness.data.prompts import Prompt, encode_turn, load_prompts, longest_sequence
from harness.data.images import image_inputs, image_record, image_tokens, with_image
from harness.data.templates import PromptFormat
from harness.store.drafter_meta import drafter_data
from harness.store.records import SCHEMA_VERSION, atomic_jsonl, environment, write_record
from harness.verify.sampling import SamplingConfig, make_generator
from harness.engine.runtime import EngineOptions, EngineRuntime, warm_up, without_captures
from harness.backend.device import timer_name


@dataclass(frozen=True)
class RunConfig:
    method: str
    target: str
    prompts: str
    out: Path
    variant: str | None = None
    draft: str | None = None
    drafter: str | None = None
    method_options: Any = field(default_factory=dict)  # a mapping of option values, or the parsed options object
    dataset: str | None = None
    category: str | None = None
    limit: int | None = None
    stratify: bool = False  # the limit spread evenly over the prompt set's categories
    prompt_format: PromptFormat = PromptFormat()  # chat template and system prompt (harness.data.templates)
    max_new_tokens: int = 128
    sampling: SamplingConfig = SamplingConfig()
    seed: int = 0
    dtype: str = "float32"
    device: str = "cpu"
    pair_with_ar: bool = False
    warmup: int = 1
    engine: EngineOptions = EngineOptions()
    verifier: str = DEFAULT_VERIFIER
    samples: int = 1  # generations per prompt and turn (test-time scaling); each has its own seed
    repeats: int = 1  # runs over the whole prompt set (same seeds): the spread of the timing across runs
    interleave: str = "auto"  # step | turn | auto (step on a host-only device, turn on CUDA): see the docstring

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise DraftcountError(f"repeats must be >= 1, got {self.repeats}")
        if self.interleave not in ("auto", "step", "turn"):
            raise DraftcountError(f"interleave must be auto, step or turn, not {self.interleave!r}")


@dataclass
class _Contender:
    role: str
    method: str
    adapter: DraftAdapter
    options: Any


def generation_seed(seed: int, prompt_index: int, turn: int, sample: int = 0) -> int:
    """The seed of one turn (of one sample of it): the same for every method in a comparison."""
    return seed * 1_000_003 + prompt_index * 97 + turn + sample * 10_000_019


def eos_ids(target: LoadedModel) -> frozenset[int]:
    """The ids a generation stops at: the tokenizer's and the generation config's end-of-sequence tokens."""
    return eos_token_ids(target.tokenizer, getattr(target.model, "generation_config", None))


def _build_contenders(config: RunConfig, target: LoadedModel, draft: LoadedModel | None) -> list[_Contender]:
    inputs = BuildInputs(target=target, draft=draft, drafter_dir=Path(config.drafter) if config.drafter else None)
    adapter, options = build_adapter(config.method, config.method_options, inputs)
    contenders = [_Contender("method", config.method, adapter, options)]
    if config.pair_with_ar:  # method ar too: the A/A control, two identical contenders interleaved
        baseline, baseline_options = build_adapter("ar", {}, inputs)
        contenders.append(_Contender("baseline", "ar", baseline, baseline_options))
    return contenders


def _record(config: RunConfig, target: LoadedModel, draft: LoadedModel | None, contender: _Contender,
            prompt: Prompt, turn: int, sample: int, prompt_ids: list[int], seed: int, result: Generation,
            graphs_captured: int, timing_reruns: int, engine: EngineOptions, interleave: str,
            repeat: int = 0, trained_on: str | None = None) -> dict[str, Any]:
    """One generation's record (``engine``: the settings it ran under, ``auto`` resolved); ``graphs_captured``: CUDA graphs captured during it (inside its timing);
    ``timing_reruns``: earlier runs of it discarded because they captured one (``without_captures``);
    ``trained_on``: what the run's drafter learnt from (``drafter_data``, read once per run)."""
    counters = result.counters.as_dict()
    return {
        "schema_version": SCHEMA_VERSION,
        "run": config.out.stem,
        "method": contender.method,
        "variant": (config.variant or config.method) if contender.role == "method" else contender.method,
        "role": contender.role,
        "compared_method": config.method,
        "method_options": options_as_dict(contender.options),
        "method_details": dict(contender.adapter.details),
        "pair_id": f"{prompt.id}#{turn}" + (f"@{sample}" if config.samples > 1 else "")
                   + (f"~{repeat}" if config.repeats > 1 else ""),
        "repeat": repeat,
        "models": {
            "target": config.target,
            "draft": config.draft,
            "drafter": config.drafter,
            "drafter_data": trained_on,
            "target_parameters": target.num_parameters,
            "draft_parameters": draft.num_parameters if draft is not None else None,
        },
        "dataset": config.dataset or Path(config.prompts).stem,
        "prompt_id": prompt.id,
        "category": prompt.category,
        "image": image_record(prompt.image) if prompt.image else None,
        "turn": turn,
        "sample": sample,
        "prompt_tokens": len(prompt_ids),
        "prompt_format": dataclasses.asdict(config.prompt_format),
        "sampling": dataclasses.asdict(config.sampling),
        "engine": dataclasses.asdict(engine),
        "verifier": config.verifier if contender.role == "method" else DEFAULT_VERIFIER,
        "seed": config.seed,
        "generation_seed": seed,
        "max_new_tokens": config.max_new_tokens,
        "dtype": config.dtype,
        "device": str(target.device),
        "timer": timer_name(target.device),
        "graphs_captured": graphs_captured,
        "timing_reruns": timing_reruns,
        "interleave": interleave,
        "counters": counters,
        "output_ids": result.output_ids,
        "output_text": target.tokenizer.decode(result.output_ids, skip_special_tokens=True) if target.tokenizer else "",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **environment(),
    }


def run(config: RunConfig, progress: bool = True) -> int:
    """Run ``config`` and write its records to ``config.out``; returns the number of records."""
    prompts = load_prompts(config.prompts, config.category, config.limit, config.stratify)
    target = load_model(config.target, config.dtype, config.device)
    if target.tokenizer is None:
        raise DraftcountError(f"target '{config.target}' has no tokenizer")
    draft = load_model(config.draft, config.dtype, config.device) if config.draft else None
    contenders = _build_contenders(config, target, draft)
    trained_on = drafter_data(config.drafter)
    eos = eos_ids(target)
    verifiers = {"method": get_verifier(config.verifier), "baseline": get_verifier(DEFAULT_VERIFIER)}  # ar: as always
    images = any(prompt.image for prompt in prompts)
    image_token, image_count = image_tokens(target.model.config) if images else (0, 0)
    location = model_location(config.target) if images else ""  # where its image processor is saved
    runtime = EngineRuntime(target, config.engine)  # one per run: its static cache and graphs serve every turn
    runtime.reserve(image_count + longest_sequence(target.tokenizer, prompts, config.max_new_tokens,
                                                   config.prompt_format))  # sized before warm-up
    interleave = config.interleave if config.interleave != "auto" else (
        "turn" if target.device.type == "cuda" else "step")
    runtimes = {contender.role: runtime for contender in contenders}
    if interleave == "step":  # generations that run side by side need caches of their own
        for contender in contenders[1:]:
            runtimes[contender.role] = EngineRuntime(target, config.engine)
            runtimes[contender.role].reserve(runtime.reserved)

    def turn_inputs(prompt: Prompt, history: list[tuple[str, str]], question: str) -> list[int]:
        """A turn's token ids: the conversation so far and ``question``, the prompt's image placeholders first."""
        ids = encode_turn(target.tokenizer, history, question, config.prompt_format)
        return with_image(ids, image_token, image_count, target.tokenizer.bos_token_id) if prompt.image else ids

    def turn_steps(contender: _Contender, ids: list[int], seed: int, name: str, max_new: int, key: str,
                   paused: bool, media: dict[str, torch.Tensor] | None):
        return generation_steps(
            target, contender.adapter, torch.tensor([ids]), max_new, config.sampling, eos,
            make_generator(seed, target.device), verify=verifiers[contender.role], prompt_name=name,
            runtime=runtimes[contender.role], prompt_key=key, paused_between_steps=paused, media=media,
        )

    def run_turn(contender: _Contender, ids: list[int], seed: int, name: str, max_new: int, key: str,
                 media: dict[str, torch.Tensor] | None) -> Generation:
        return run_interleaved([turn_steps(contender, ids, seed, name, max_new, key, False, media)])[0]

    media_of: dict[str, dict[str, torch.Tensor]] = {}  # each image read once per run, whatever its samples and turns

    def prompt_media(prompt: Prompt) -> dict[str, torch.Tensor] | None:
        if not prompt.image:
            return None
        if prompt.image not in media_of:
            media_of[prompt.image] = image_inputs(location, prompt.image)
        return media_of[prompt.image]

    def warm_turn(contender: _Contender, index: int) -> Generation:
        prompt = prompts[index % len(prompts)]
        return run_turn(contender, turn_inputs(prompt, [], prompt.turns[0]), config.seed, f"{prompt.id} (warm-up)",
                        min(16, config.max_new_tokens), WARM_UP_KEY, prompt_media(prompt))

    for contender in contenders:  # until a warm-up captures no new CUDA graph (at most SETTLING_WARMUPS more)
        warm_up(lambda index: warm_turn(contender, index), lambda: runtimes[contender.role].captures, config.warmup)

    def timed_turn(order: list[_Contender], inputs: list[list[int]], seed: int, name: str,
                   key: str, media: dict[str, torch.Tensor] | None) -> list[tuple[Generation, int, int]]:
        """Every contender's generation of one turn, with the graphs it captured and its discarded reruns."""
        if interleave == "step":
            steps = [turn_steps(contender, ids, seed, name, config.max_new_tokens, key, True, media)
                     for contender, ids in zip(order, inputs)]
            return [(result, 0, 0) for result in run_interleaved(steps)]
        return [without_captures(lambda: run_turn(contender, ids, seed, name, config.max_new_tokens, key, media),
                                 lambda: runtimes[contender.role].captures)
                for contender, ids in zip(order, inputs)]

    def conversation(handle, index: int, prompt: Prompt, sample: int, repeat: int) -> Iterator[float]:
        """Every turn of one prompt for every contender, records written; yields each generation's tokens per
        target forward (the progress bar's figure)."""
        order = contenders if (index + sample) % 2 == 0 else contenders[::-1]
        histories = [[] for _ in order]
        media = prompt_media(prompt)
        for turn, question in enumerate(prompt.turns):
            seed = generation_seed(config.seed, index, turn, sample)
            name = f"{prompt.id} turn {turn}" + (f" sample {sample}" if config.samples > 1 else "")
            inputs = [turn_inputs(prompt, history, question) for history in histories]
            outcomes = timed_turn(order, inputs, seed, name, f"{prompt.id}#{turn}", media)
            for contender, history, ids, (result, captured, reruns) in zip(order, histories, inputs, outcomes):
                write_record(handle, _record(config, target, draft, contender, prompt, turn, sample, ids, seed, result,
                                             captured, reruns, runtimes[contender.role].options, interleave, repeat,
                                             trained_on))
                history.append((question, target.tokenizer.decode(result.output_ids, skip_special_tokens=True)))
                yield result.counters.tokens_per_forward

    written = 0
    total_turns = sum(len(prompt.turns) for prompt in prompts) * config.samples * config.repeats
    with atomic_jsonl(config.out) as handle, tqdm(
        total=total_turns * len(contenders), desc=f"{config.method} on {Path(config.prompts).name}",
        unit="gen", disable=not progress,
    ) as bar:
        for repeat in range(config.repeats):
            for index, prompt in enumerate(prompts):
                for sample in range(config.samples):
                    for tau in conversation(handle, index, prompt, sample, repeat):
                        written += 1
                        bar.update(1)
                        bar.set_postfix(tokens_per_forward=f"{tau:.2f}")
    return written
