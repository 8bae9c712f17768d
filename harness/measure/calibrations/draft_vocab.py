"""Benchmark: what a draft vocabulary saves a drafter per decoding step (``harness.training.draft_vocab``).

One drafter family (default `eagle`) is written untrained (0 training steps) once per draft-vocabulary size asked
for (``--draft-vocab 0 8192 4096``; 0 is the target's whole vocabulary, and it runs twice: the A/A control), for a
random target shaped like SmolLM2-135M-Instruct's layers (hidden 576, 9 heads, 3 KV heads, MLP 1536, vocabulary
49,152, tied embeddings; ``--layers`` of them: the drafter's cost does not depend on the target's depth), its draft
vocabulary chosen from a Zipf-distributed token stream. The variants decode the same random prompts greedily,
step-interleaved in a rotating order (``run_interleaved``), and each times its own ``propose`` (everything a
decoding step's drafting runs: the head's catch-up and tree expansions, their logits over the draft vocabulary, the
beam's top-k and the id map). Prints per variant the milliseconds of drafting per step (median over trials), the
drafter forwards and analytic drafter MFLOPs per step (the cost model's), and per variant against the first
full-vocabulary one the geometric mean of the per-trial ratios of drafting time with a 95% bootstrap interval.

    python -m harness measure draft-vocab --threads 1                           # eagle, full vs 8192 vs 4096
    python -m harness measure draft-vocab --method eagle --opt fusion=eagle3 --draft-vocab 0 8192
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig

from harness.analysis.timing import geometric_mean, prompt_bootstrap_interval
from harness.backend.models import LoadedModel, load_model, random_llama
from harness.data.token_streams import save_tokens
from harness.engine.loop import generation_steps, run_interleaved
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.options import parse_key_values
from harness.training.drafters import DrafterTrainRequest
from harness.verify.sampling import SamplingConfig

SMOLLM2_LAYER = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                     num_key_value_heads=3, max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=100000.0,
                     tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def zipf_stream(vocab: int, length: int, seed: int = 0) -> torch.Tensor:
    """``length`` tokens with P(rank r) proportional to 1 / r over a random order of the vocabulary."""
    generator = torch.Generator(device="cpu").manual_seed(seed)  # host: a token stream written to disk
    weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)  # host: the stream's law, on the host
    ranks = torch.multinomial(weights, length, replacement=True, generator=generator)
    return torch.randperm(vocab, generator=generator)[ranks].to(torch.int32)  # host: the stream, saved


def write_drafters(root: Path, method: str, sizes: list[int], options: dict[str, str]) -> dict[int, Path]:
    """One untrained drafter of ``method`` per draft-vocabulary size, for the target in ``root``."""
    out = {}
    for size in dict.fromkeys(sizes):
        out[size] = root / f"drafter-{size}"
        method_spec(method).train(DrafterTrainRequest(
            method=method, target=str(root / "target"), data=root / "tokens.pt", out=out[size], steps=0,
            progress=False, options={"seq_len": "64", **options, "draft_vocab": str(size)}))
    return out


def timed_propose(adapter, totals: dict[str, float]):
    """``adapter`` with its ``propose`` adding its wall seconds to ``totals["propose"]``."""
    propose = adapter.propose

    def wrapper(ctx, sequence):
        started = time.perf_counter()
        tree = propose(ctx, sequence)
        tree.resolve()  # a tree grown on the device: its shape read here, so its work is inside the timing
        totals["propose"] += time.perf_counter() - started
        return tree

    adapter.propose = wrapper
    return adapter


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="eagle", help="a drafter family that takes draft_vocab")
    parser.add_argument("--opt", action="append", metavar="KEY=VALUE", help="its training option, repeatable")
    parser.add_argument("--draft-vocab", nargs="+", type=int, default=[0, 8192, 4096],
                        help="draft-vocabulary sizes (0: the whole vocabulary; the first is the reference)")
    parser.add_argument("--layers", type=int, default=2, help="target layers (the drafter's cost ignores them)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=24)
    args = parser.parse_args(argv)
    if args.trials < 2 or args.new_tokens < 2 or not args.draft_vocab:
        parser.error("need --trials >= 2, --new-tokens >= 2 and at least one --draft-vocab size")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        random_llama(LlamaConfig(**SMOLLM2_LAYER, num_hidden_layers=args.layers)).save_pretrained(root / "target")
        save_tokens(root / "tokens.pt", zipf_stream(SMOLLM2_LAYER["vocab_size"], 200_000))
        drafters = write_drafters(root, args.method, args.draft_vocab, parse_key_values(args.opt))
        target = load_model(str(root / "target"), with_tokenizer=False)
        names = [f"N={size or 'full'}" for size in args.draft_vocab]
        names = [name if name not in names[:index] else f"{name} again" for index, name in enumerate(names)]
        if names[0] + " again" not in names:  # the A/A control: the reference twice
            names.append(names[0] + " again")
        sizes = dict(zip(names, [*args.draft_vocab, args.draft_vocab[0]]))
        adapters = {name: build_adapter(args.method, {}, BuildInputs(target, None, drafters[size]))[0]
                    for name, size in sizes.items()}
        return report(measure(target, adapters, args), adapters, sizes, args)


def measure(target: LoadedModel, adapters: dict, args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    """Per variant, per trial: drafting seconds, decoding steps, drafter forwards and FLOPs (trial 0: warm-up)."""
    generator = torch.Generator(device="cpu").manual_seed(1)  # host: the prompts, the same on every device
    names = list(adapters)
    trials: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for trial in range(args.trials + 1):
        prompt = torch.randint(0, target.vocab_size, (1, args.prompt_tokens),  # host: generate moves it
                               generator=generator)
        order = names[trial % len(names):] + names[:trial % len(names)]
        totals = {name: defaultdict(float) for name in order}
        steps = [generation_steps(target, timed_propose(adapters[name], totals[name]), prompt, args.new_tokens,
                                  SamplingConfig(), paused_between_steps=True) for name in order]
        for name, result in zip(order, run_interleaved(steps)):
            counters = result.counters
            totals[name].update(steps=len(counters.step_accepted), forwards=counters.drafter.forwards,
                                flops=counters.drafter.flops)
            if trial:
                trials[name].append(dict(totals[name]))
    return trials


def report(trials: dict[str, list[dict[str, float]]], adapters: dict, sizes: dict[str, int],
           args: argparse.Namespace) -> int:
    names = list(trials)
    per_step = {name: np.array([row["propose"] / row["steps"] for row in rows]) for name, rows in trials.items()}
    print(f"{args.method} drafters (untrained) for a random SmolLM2-135M-shaped target ({args.layers} layers: hidden "
          f"576, vocabulary 49,152), torch threads {torch.get_num_threads()}; {args.trials} interleaved trials of "
          f"{args.new_tokens} greedy tokens after {args.prompt_tokens} random prompt tokens")
    print(f"{'variant':14s} {'N':>6s} {'draft ms/step':>13s} {'fwd/step':>8s} {'MFLOPs/step':>11s} "
          f"{'time / ' + names[0]:>28s}")
    reference = per_step[names[0]]
    for name in names:
        rows = trials[name]
        steps = sum(row["steps"] for row in rows)
        ratios = per_step[name] / reference
        low, high = prompt_bootstrap_interval(ratios, np.arange(len(ratios)))
        vocab = adapters[name].details.get("draft_vocab", sizes[name])
        print(f"{name:14s} {vocab:6d} {1000 * np.median(per_step[name]):13.2f} "
              f"{sum(row['forwards'] for row in rows) / steps:8.2f} {sum(row['flops'] for row in rows) / steps / 1e6:11.1f} "
              f"{geometric_mean(ratios):10.3f} [{low:.3f}, {high:.3f}]")
    return 0


if __name__ == "__main__":
    main()
