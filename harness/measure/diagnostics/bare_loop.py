"""Benchmark: our `ar` (the whole engine: adapter, tree, verifier, cache edits, counters, phase clock) against bare
decode loops on the same model, prompts and lengths, with an A/A control.

Contenders, each decoding the same prompts to the same number of tokens (EOS ignored), greedy:

- ``bare``: a DynamicCache, one eager forward per token, argmax: nothing else;
- ``replay`` (the engine's floor): ``harness.measure.diagnostics.replay_loop``, one captured step replayed per token
  (the forward, the mask, the argmax on the device), the host reading each token once; on a CPU the same step runs
  eagerly;
- ``ar`` and ``ar again``: our engine twice (the A/A control: their ratio is the measurement's own noise);
- with ``--generate static|compiled``: transformers' ``generate`` with a static cache (``compiled``: and its
  ``torch.compile``), as ``measure ar-vs-generate`` runs it.

On a CPU the contenders run step-interleaved (one token of each in turn, in a rotating order, each timing only its
own steps) so that machine noise hits all alike; on a GPU, where a timing cannot pause, each trial runs them one
after another in a rotating order. Prints tokens/s of each and the paired ratios (geometric mean and interval over
trials), and checks that all produced the same tokens.

    python -m harness measure bare-loop --model work/models/target                  # the default target
    python -m harness measure bare-loop --random-shape workflow/config/default.yaml  # untrained, same shape
    python -m harness measure bare-loop --shape llama-3.1-8b --device cuda --dtype bfloat16 --new-tokens 128
"""

from __future__ import annotations

import argparse
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import DynamicCache

from harness.analysis.timing import geometric_mean, prompt_bootstrap_interval
from harness.backend.device import Stopwatch
from harness.backend.kv_cache import cache_argument
from harness.backend.models import LoadedModel, load_model, resolve_dtype, wrap_model
from harness.engine.loop import generation_steps, run_interleaved
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.errors import DraftcountError
from harness.measure.diagnostics.ar_vs_generate import REFERENCES
from harness.measure.shapes import SHAPES, config_target_shape, random_llama_shaped, shaped_llama
from harness.measure.diagnostics.replay_loop import ReplayLoop
from harness.options import parse_key_values, parse_options
from harness.verify.sampling import SamplingConfig


def bare_decode_steps(lm: LoadedModel, prompt: torch.Tensor, new_tokens: int) -> Generator[None, None, Timed]:
    """Greedy decoding with nothing but the model: prefill, then one forward and one argmax per token. Yields
    between tokens like ``generation_steps`` (its stopwatch paused meanwhile on a CPU); returns the tokens and
    seconds."""
    model = lm.model
    pauses = lm.device.type == "cpu"
    cache = DynamicCache(config=model.config)
    watch = Stopwatch(lm.device)
    with torch.inference_mode():
        logits = model(input_ids=prompt, use_cache=True, logits_to_keep=1, **cache_argument(model, cache)).logits
        token = logits[:, -1].argmax(-1, keepdim=True)
    produced = [token]
    for _ in range(new_tokens - 1):
        if pauses:
            watch.pause()
        yield
        if pauses:
            watch.resume()
        with torch.inference_mode():
            logits = model(input_ids=token, use_cache=True, **cache_argument(model, cache)).logits
            token = logits[:, -1].argmax(-1, keepdim=True)
        produced.append(token)
    tokens = torch.cat(produced, dim=-1)[0].tolist()
    return Timed(tokens, watch.elapsed())


@dataclass
class Timed:
    tokens: list[int]
    seconds: float


def replay_decode_steps(loop: ReplayLoop, prompt: torch.Tensor, new_tokens: int) -> Generator[None, None, Timed]:
    """``loop``'s decoding (reading each token, as an engine must), timed like ``bare_decode_steps``."""
    pauses = loop.lm.device.type == "cpu"
    watch = Stopwatch(loop.lm.device)
    steps = loop.decode_steps(prompt, new_tokens, read_each_token=True)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return Timed(done.value, watch.elapsed())
        if pauses:
            watch.pause()
        yield
        if pauses:
            watch.resume()


def generate_steps(lm: LoadedModel, prompt: torch.Tensor, new_tokens: int,
                   reference: str) -> Generator[None, None, Timed]:
    """transformers' ``generate`` (``REFERENCES[reference]``) as one whole step."""
    watch = Stopwatch(lm.device)
    with torch.inference_mode():
        out = lm.model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                **REFERENCES[reference])
    seconds = watch.elapsed()
    yield from ()
    return Timed(out[0, prompt.shape[1]:].tolist(), seconds)


def run_whole(steps: list[Generator[None, None, Timed]]) -> list[Timed]:
    """Each generation run through, one after another (a GPU's timings cannot pause)."""
    return [run_interleaved([one])[0] for one in steps]


def engine_ar(lm: LoadedModel, engine: EngineOptions) -> tuple:
    """An `ar` adapter and an engine runtime of its own."""
    return build_adapter("ar", {}, BuildInputs(lm, None, None))[0], EngineRuntime(lm, engine)


def load_lm(args: argparse.Namespace, parser: argparse.ArgumentParser) -> LoadedModel:
    if args.model:
        return load_model(args.model, args.dtype, args.device, with_tokenizer=False)
    if args.shape:
        model = shaped_llama(SHAPES[args.shape], resolve_dtype(args.dtype), args.device)  # built on the device
        return wrap_model(model, source=f"random {args.shape} shape")
    try:
        shape, vocab_size = config_target_shape(args.random_shape)
    except DraftcountError as error:
        parser.error(str(error))
    model = random_llama_shaped(shape, vocab_size).to(args.device, resolve_dtype(args.dtype))
    return wrap_model(model, source=f"random {shape} from {' + '.join(map(str, args.random_shape))}")


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="HF model directory (the workflow's target: work/models/target)")
    source.add_argument("--random-shape", nargs="+", type=Path, metavar="CONFIG",
                        help="a random Llama shaped like these workflow config files' target (merged in order)")
    source.add_argument("--shape", choices=sorted(SHAPES), help="a random Llama of a published shape, built on the "
                                                                "device (llama-3.1-8b: 16 GB in bfloat16)")
    parser.add_argument("--generate", choices=sorted(REFERENCES), help="add transformers' generate() as a contender")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the workflow's bench jobs: 1)")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--prompt-tokens", type=int, default=256, help="the workflow's prompts: a few hundred")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--engine", action="append", metavar="KEY=VALUE", help="engine switch for our ar")
    args = parser.parse_args(argv)
    if args.trials < 2 or args.new_tokens < 2 or args.prompt_tokens < 1:
        parser.error("need --trials >= 2, --new-tokens >= 2 and --prompt-tokens >= 1")
    torch.set_num_threads(args.threads)
    engine = parse_options(EngineOptions, parse_key_values(args.engine), "the engine (--engine)")
    lm = load_lm(args, parser)
    lm.model.generation_config.eos_token_id = None
    generator = torch.Generator(device="cpu").manual_seed(1)  # host: the prompts, the same on every device
    # host: drawn on the host, then moved
    prompts = [torch.randint(0, lm.vocab_size, (1, args.prompt_tokens), generator=generator).to(lm.device)
               for _ in range(args.trials + 1)]

    pauses = lm.device.type == "cpu"

    def ours(adapter, runtime: EngineRuntime):  # each `ar` its own adapter and runtime: they run side by side
        def steps(prompt: torch.Tensor) -> Generator[None, None, Timed]:
            result = yield from generation_steps(lm, adapter, prompt, args.new_tokens, SamplingConfig(),
                                                 runtime=runtime, paused_between_steps=pauses)
            return Timed(result.output_ids, result.counters.wall_seconds)
        return steps

    loop = ReplayLoop(lm, args.prompt_tokens + args.new_tokens)
    contenders = {"bare": lambda prompt: bare_decode_steps(lm, prompt, args.new_tokens),
                  "replay": lambda prompt: replay_decode_steps(loop, prompt, args.new_tokens),
                  "ar": ours(*engine_ar(lm, engine)), "ar again": ours(*engine_ar(lm, engine))}
    if args.generate:
        lm.model.generation_config.pad_token_id = 0
        contenders["generate"] = lambda prompt: generate_steps(lm, prompt, args.new_tokens, args.generate)
    names = list(contenders)
    drive = run_interleaved if pauses else run_whole
    drive([contenders[name](prompts[0]) for name in names])  # warm-up (and captures), not counted
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    mismatches = 0
    for trial, prompt in enumerate(prompts[1:]):
        shift = trial % len(names)
        order = names[shift:] + names[:shift]
        results = dict(zip(order, drive([contenders[name](prompt) for name in order])))
        for name, result in results.items():
            rates[name].append(args.new_tokens / result.seconds)
        mismatches += len({tuple(result.tokens) for result in results.values()}) > 1

    print(f"model: {lm.source} ({lm.num_parameters / 1e6:.1f}M parameters), device {lm.device}, dtype {lm.dtype}, "
          f"threads {torch.get_num_threads()}")
    print(f"{args.trials} interleaved trials, {args.prompt_tokens} prompt tokens, {args.new_tokens} new tokens "
          "(prefill included), greedy")
    for name, values in rates.items():
        print(f"{name:9s}: {np.median(values):8.1f} tokens/s (median)")
    trials = np.arange(args.trials)
    pairs = [("ar / bare", "ar", "bare"), ("ar / replay", "ar", "replay"), ("A/A: ar again / ar", "ar again", "ar")]
    if args.generate:
        pairs.insert(2, (f"ar / generate ({args.generate})", "ar", "generate"))
    for label, numerator, denominator in pairs:
        ratios = np.array(rates[numerator]) / np.array(rates[denominator])
        low, high = prompt_bootstrap_interval(ratios, trials)
        print(f"{label:24s}: {geometric_mean(ratios):.3f} [{low:.3f}, {high:.3f}] (geometric mean of paired "
              "ratios, 95% interval)")
    overhead = geometric_mean(np.array(rates["bare"]) / np.array(rates["ar"])) - 1
    print(f"engine overhead per token over the bare loop: {100 * overhead:+.1f}%")
    floor = geometric_mean(np.array(rates["ar"]) / np.array(rates["replay"]))
    print(f"ar at {floor:.2f}x of the replayed loop's tokens/s (the engine's floor; goal on a GPU: >= 0.8x)")
    print(f"outputs identical in {args.trials - mismatches}/{args.trials} trials")
    return 1 if mismatches else 0


if __name__ == "__main__":
    main()
