"""`compile=on` keeps the methods lossless on the CPU (issue 81, item 2): the target through torch.compile's inductor
(dynamic shapes, the static cache) for ar, sd, eagle, lyanna and dflash. Greedy: every output is `ar`'s eager one
(the Markov zoo, trained drafters). Sampling: with the same seed every token is the eager run's, which the sampling
check holds to the target's law (the same logits up to rounding, the same acceptance draws).

Slow: inductor compiles the target's forward once per guard set (the prefill, one token, a tree with its mask, with
hidden states or not). Each method's first compiled generation, the compile time, is printed (``-s``); on a shared
2-core machine under load (2026-11-29), a cold cache: ar 185 s, sd 32 s, eagle 77 s (hidden states), lyanna 0.1 s
(eagle's guard sets), dflash 19 s; again with inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``) warm: 47, 23,
117 (the load), 1.1 and 22 s, the file 12 min 52 s with 4 prompts a check (3 now); at 3 prompts, a cold cache, load
about 9: 82, 34, 80, 0.5 and 44 s, 8 min 38 s and 295 s of CPU (2026-11-29, AMD EPYC).

With aot_eager (dynamo's graphs, no code generation) the same file took as long (271 s of CPU: ar 24 s, sd 12 s,
eagle 76 s, lyanna 1.7 s, dflash 29 s, then the recompiles of the later prompts): the cost is dynamo's tracing and
guards, not inductor. Even one method (sd, one prompt, aot_eager) took 76 s of CPU with its zoo. The suite's budget
(12 minutes on 2 cores, docs/testing.md) has no room for it, so the file runs on request only:
``DRAFTCOUNT_COMPILE=full pytest tests/methods/conformance/test_compile.py -s`` (the five methods, three prompts,
inductor) or ``DRAFTCOUNT_COMPILE=quick`` (sd, one prompt, aot_eager); the GPU window runs the CUDA side."""

from __future__ import annotations

import os
import time

import pytest

from harness import SamplingConfig, generate
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.verify.sampling import make_generator
from tests.methods.conformance import GREEDY, METHODS, Zoo, build_markov_zoo, prompts

REQUEST = os.environ.get("DRAFTCOUNT_COMPILE", "")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REQUEST not in ("quick", "full"), reason=(
    "compile=on's lossless checks run on request: DRAFTCOUNT_COMPILE=quick or full (the module's docstring)"))]
FULL = REQUEST == "full"  # the five methods, three prompts, inductor (above)
COMPILED = [name for name in (("ar", "sd", "eagle", "lyanna", "dflash") if FULL else ("sd",)) if name in METHODS]
BACKEND = "inductor" if FULL else "aot_eager"
PROMPTS = 3 if FULL else 1


@pytest.fixture(scope="module")
def markov_zoo(tmp_path_factory) -> Zoo:
    return build_markov_zoo(tmp_path_factory.mktemp("conformance-compile"))


@pytest.mark.parametrize("method", COMPILED)
def test_compiled_target_keeps_greedy_and_sampled_outputs(markov_zoo, method):
    target = markov_zoo.target
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    adapter = markov_zoo.build(method)
    runtime = EngineRuntime(target, EngineOptions(kv_cache="static", compile="on", compile_backend=BACKEND))
    assert runtime.target.model is not target.model
    started = time.perf_counter()
    for index, prompt in enumerate(prompts()[:PROMPTS]):
        expected = generate(target, ar, prompt, 24, GREEDY).output_ids
        assert generate(target, adapter, prompt, 24, GREEDY, runtime=runtime).output_ids == expected, (method, index)
        if index == 0:
            print(f"\n{method} ({BACKEND}): first compiled generation (compile included) "
                  f"{time.perf_counter() - started:.1f} s")
    sampling = SamplingConfig(temperature=1.0)
    for seed, prompt in enumerate(prompts()[:PROMPTS]):
        eager = generate(target, adapter, prompt, 24, sampling, generator=make_generator(seed, target.device))
        compiled = generate(target, adapter, prompt, 24, sampling, generator=make_generator(seed, target.device),
                            runtime=runtime)
        assert compiled.output_ids == eager.output_ids, (method, seed)
