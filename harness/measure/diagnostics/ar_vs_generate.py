"""Benchmark: our `ar` baseline against transformers' model.generate() on the same model.

Both decode greedily the same prompts to exactly the same number of tokens
(EOS disabled), interleaved trial by trial (alternating which goes first) so
machine noise hits both alike. Prints tokens/s of each and the ratio; checks
that both produced the same tokens.

    python -m harness measure ar-vs-generate                 # random ~20M-parameter Llama, CPU
    python -m harness measure ar-vs-generate --model DIR --device cuda --dtype bfloat16
    python -m harness measure ar-vs-generate --model DIR --device cuda --dtype bfloat16 \
        --engine kv_cache=static --engine cuda_graphs=on                   # our ar with the overhead switches
    python -m harness measure ar-vs-generate --engine kv_cache=static --reference static   # like for like
    python -m harness measure ar-vs-generate --profile-out /tmp/ops.csv   # where the host time goes
    python -m harness measure ar-vs-generate --random-shape workflow/config/default.yaml \
        workflow/config/gpu.yaml --device cuda --dtype bfloat16   # the GPU profile's target shape, untrained

--random-shape builds, instead of the ~20M default, a Llama with random weights shaped like the workflow
config's target (target.shape and tokenizer.vocab_size of the files merged in order): the same architecture,
dtype and forwards as the trained model, so the same timings, in a second instead of the zoo's minutes.

--reference says what generate() runs: its default (a DynamicCache), `static` (cache_implementation="static",
no compile: what our kv_cache=static engine does) or `compiled` (a static cache, and on CUDA transformers'
own automatic torch.compile of the decoding forward: the reference for our cuda_graphs engine).
--profile-out profiles one more generation of each (torch.profiler; on CUDA the runtime's calls and the
kernels' device time too) and writes, per generated token, every op's calls and self host time in both,
largest difference first, after the wall time, the time in all host-side ops and the time outside them
(harness/op_profile.py); those and the top differences are printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import torch


from harness.verify.sampling import SamplingConfig
from harness.engine.loop import generate
from harness.backend.models import load_model, random_llama, resolve_dtype, wrap_model
from harness.options import parse_key_values, parse_options
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.errors import DraftcountError
from harness.measure.diagnostics.op_profile import compare_per_token, format_rows, profile_ops, write_rows
from harness.measure.shapes import SMALL_LLAMA, config_target_shape, random_llama_shaped
from harness.backend.device import Stopwatch
from harness.engine.method_spec import BuildInputs, build_adapter


REFERENCES = {  # --reference: model.generate()'s keyword arguments
    "default": {},
    "static": {"cache_implementation": "static", "disable_compile": True},
    "compiled": {"cache_implementation": "static"},
}


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", help="HF model directory (default: a random ~20M-parameter Llama)")
    source.add_argument("--random-shape", nargs="+", type=Path, metavar="CONFIG",
                        help="a random Llama shaped like these workflow config files' target (merged in order)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--engine", action="append", metavar="KEY=VALUE",
                        help="engine switch for our ar, repeatable (e.g. kv_cache=static, cuda_graphs=on)")
    parser.add_argument("--reference", choices=sorted(REFERENCES), default="default",
                        help="what generate() runs: its default cache, a static one, or a static one compiled")
    parser.add_argument("--profile-out", type=Path, help="CSV of both loops' ops per generated token (profiled)")
    args = parser.parse_args(argv)
    engine = parse_options(EngineOptions, parse_key_values(args.engine), "the engine (--engine)")

    if args.model:
        lm = load_model(args.model, args.dtype, args.device, with_tokenizer=False)
    elif args.random_shape:
        try:
            shape, vocab_size = config_target_shape(args.random_shape)
        except DraftcountError as error:
            parser.error(str(error))
        model = random_llama_shaped(shape, vocab_size).to(args.device, resolve_dtype(args.dtype))
        lm = wrap_model(model, source=f"random {shape} from {' + '.join(map(str, args.random_shape))}")
    else:
        lm = wrap_model(random_llama(SMALL_LLAMA).to(args.device, resolve_dtype(args.dtype)), source="random ~20M Llama")
    lm.model.generation_config.eos_token_id = None
    lm.model.generation_config.pad_token_id = 0
    params = lm.num_parameters
    adapter, _ = build_adapter("ar", {}, BuildInputs(lm, None, None))
    runtime = EngineRuntime(lm, engine)
    generator = torch.Generator(device="cpu").manual_seed(1)  # host: the prompts, the same on every device
    # host: drawn on the host, then moved
    prompts = [torch.randint(0, lm.vocab_size, (1, args.prompt_tokens), generator=generator).to(lm.device)
               for _ in range(args.trials + 1)]

    def ours(prompt: torch.Tensor) -> list[int]:
        return generate(lm, adapter, prompt, args.new_tokens, SamplingConfig(), runtime=runtime).output_ids

    def theirs(prompt: torch.Tensor) -> list[int]:
        with torch.inference_mode():
            out = lm.model.generate(prompt, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                    do_sample=False, **REFERENCES[args.reference])
        return out[0, prompt.shape[1]:].tolist()

    def timed(fn, prompt) -> tuple[float, list[int]]:
        watch = Stopwatch(lm.device)
        tokens = fn(prompt)
        return args.new_tokens / watch.elapsed(), tokens

    timed(ours, prompts[0]), timed(theirs, prompts[0])  # warm-up, not counted
    rates = {"ours": [], "generate": []}
    mismatches = 0
    for trial, prompt in enumerate(prompts[1:]):
        order = [("ours", ours), ("generate", theirs)]
        results = {}
        for name, fn in order if trial % 2 == 0 else order[::-1]:
            rate, tokens = timed(fn, prompt)
            rates[name].append(rate)
            results[name] = tokens
        mismatches += results["ours"] != results["generate"]

    ours_rate, their_rate = statistics.median(rates["ours"]), statistics.median(rates["generate"])
    paired = statistics.median(a / b for a, b in zip(rates["ours"], rates["generate"]))
    print(f"model: {lm.source} ({params / 1e6:.1f}M parameters), device {lm.device}, "
          f"dtype {lm.dtype}, threads {torch.get_num_threads()}, engine {dataclasses.asdict(engine)}")
    print(f"{args.trials} interleaved trials, {args.prompt_tokens} prompt tokens, {args.new_tokens} new tokens, greedy")
    print(f"ours (ar)         : {ours_rate:8.1f} tokens/s (median)")
    print(f"model.generate()  : {their_rate:8.1f} tokens/s (median; reference: {args.reference} "
          f"{REFERENCES[args.reference]})")
    print(f"ratio ours/generate: {ours_rate / their_rate:.3f} (ratio of medians), {paired:.3f} (median of paired ratios)")
    print(f"outputs identical in {args.trials - mismatches}/{args.trials} trials")
    if args.profile_out:
        rows = compare_per_token(profile_ops(lambda: ours(prompts[0]), lm.device),
                                 profile_ops(lambda: theirs(prompts[0]), lm.device), args.new_tokens, args.new_tokens)
        write_rows(rows, args.profile_out)
        print(f"profiled (one generation each; the profiler's own overhead included), per generated token; "
              f"all rows in {args.profile_out}")
        print(format_rows(rows, limit=15))


if __name__ == "__main__":
    main()
