"""One-off GPU diagnostics (not committed): where ar's and eagle's per-token time goes under CUDA graphs, the eager
pass's slowness, the replay floor, the 8B shape."""
import cProfile, io, os, pstats, statistics, sys, tempfile, time, traceback
from pathlib import Path
import torch
from transformers import LlamaConfig
from torch.profiler import ProfilerActivity, profile
from harness.backend.models import random_llama, wrap_model, load_model
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.engine.runtime import EAGER, EngineOptions, EngineRuntime
from harness.engine.loop import generate
from harness.verify.sampling import SamplingConfig
from harness.measure.replay_loop import ReplayLoop
from harness.backend.device import Stopwatch
from harness.training.drafters import DrafterTrainRequest
from harness.data.token_streams import save_tokens

T0 = time.time()
OUT = Path(os.environ.get("OUT", "/tmp"))
def say(*a):
    print(f"[{time.time()-T0:5.0f}s]", *a, flush=True)

dev = os.environ.get("DIAG_DEVICE", "cuda")
cfg = LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1408, num_hidden_layers=12, num_attention_heads=8,
                  num_key_value_heads=8, max_position_embeddings=1024, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None, tie_word_embeddings=False)
model = random_llama(cfg, 0, torch.bfloat16, dev)
root = Path(tempfile.mkdtemp())
model.save_pretrained(root / "target")
lm = load_model(str(root / "target"), "bfloat16", dev, with_tokenizer=False)
prompt = torch.randint(0, 4096, (1, 128), generator=torch.Generator(device="cpu").manual_seed(1)).to(dev)
N = int(os.environ.get("DIAG_N", 128))
G = SamplingConfig()

def rate(adapter, runtime, n=N, reps=3):
    generate(lm, adapter, prompt, n, G, runtime=runtime)
    generate(lm, adapter, prompt, n, G, runtime=runtime)
    rates, phases = [], None
    for _ in range(reps):
        g = generate(lm, adapter, prompt, n, G, runtime=runtime)
        rates.append(g.counters.new_tokens / g.counters.wall_seconds)
        phases = {k: round(1e6 * v / g.counters.new_tokens, 1) for k, v in g.counters.phase_seconds.items()}
    return statistics.median(rates), phases, g

def host_profile(fn, label, top=25):
    pr = cProfile.Profile(); pr.enable(); fn(); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    (OUT / f"cprofile-{label}.txt").write_text(s.getvalue())
    lines = [l for l in s.getvalue().splitlines() if l.strip()][:top + 8]
    print("\n".join(lines[3:]), flush=True)

def runtime_calls(fn, tokens, label):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        fn(); torch.cuda.synchronize() if dev == "cuda" else None
    rows = sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)
    text = [f"{'op':50s} {'calls/tok':>9s} {'self cpu us/tok':>15s}"]
    for e in rows[:40]:
        text.append(f"{e.key[:50]:50s} {e.count / tokens:9.2f} {e.self_cpu_time_total / tokens:15.1f}")
    cuda = [e for e in p.key_averages() if e.key.startswith(("cuda", "cu"))]
    text.append("-- CUDA runtime calls per token --")
    for e in sorted(cuda, key=lambda e: -e.count):
        text.append(f"{e.key[:50]:50s} {e.count / tokens:9.2f} {e.self_cpu_time_total / tokens:15.1f}")
    (OUT / f"profile-{label}.txt").write_text("\n".join(text))
    print("\n".join(text[:25] + text[text.index("-- CUDA runtime calls per token --"):][:15]), flush=True)

def guarded(name, fn):
    say("=====", name)
    try:
        fn()
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()

ar, _ = build_adapter("ar", {}, BuildInputs(lm, None, None))
rt = EngineRuntime(lm)
say("runtime options", rt.options)

def part_ar():
    r, ph, g = rate(ar, rt)
    say(f"ar graphs: {r:.0f} tok/s; us/token by phase {ph}")
    loop = ReplayLoop(lm, 128 + N)
    for read in (False, True):
        loop.decode(prompt, N, read)
        w = Stopwatch(lm.device); toks = loop.decode(prompt, N, read); s = w.elapsed()
        say(f"replay loop read_each={read}: {N / s:.0f} tok/s; same tokens as ar: {toks == g.output_ids}")
    host_profile(lambda: generate(lm, ar, prompt, N, G, runtime=rt), "ar")
    runtime_calls(lambda: generate(lm, ar, prompt, N, G, runtime=rt), N, "ar")

def part_eager():
    eager = EngineRuntime(lm, EAGER)
    r, ph, _ = rate(ar, eager, n=48, reps=2)
    say(f"ar eager (dynamic, no graphs): {r:.1f} tok/s; us/token {ph}")
    torch.backends.cuda.enable_cudnn_sdp(False) if dev == "cuda" else None
    r2, ph2, _ = rate(ar, eager, n=48, reps=2)
    say(f"ar eager, cuDNN SDPA off: {r2:.1f} tok/s; us/token {ph2}")
    torch.backends.cuda.enable_cudnn_sdp(True) if dev == "cuda" else None
    runtime_calls(lambda: generate(lm, ar, prompt, 32, G, runtime=eager), 32, "ar-eager")

def part_eagle():
    save_tokens(root / "tokens.pt", torch.randint(0, 4096, (8192,), generator=torch.Generator(device="cpu").manual_seed(0)))
    method_spec("eagle").train(DrafterTrainRequest(method="eagle", target=str(root / "target"), data=root / "tokens.pt",
                                                   out=root / "eagle", steps=0, progress=False, options={"seq_len": "64"}))
    eagle, _ = build_adapter("eagle", {"top_k": 4, "depth": 5, "budget": 24}, BuildInputs(lm, None, root / "eagle"))
    r, ph, g = rate(eagle, rt)
    say(f"eagle graphs: {r:.0f} tok/s, tau {g.counters.new_tokens / max(1, g.counters.target.forwards):.2f}; us/token {ph}")
    host_profile(lambda: generate(lm, eagle, prompt, N, G, runtime=rt), "eagle", top=30)
    runtime_calls(lambda: generate(lm, eagle, prompt, N, G, runtime=rt), N, "eagle")

for name, fn in (("ar under CUDA graphs", part_ar), ("eager pass", part_eager), ("eagle", part_eagle)):
    guarded(name, fn)
say("done")
