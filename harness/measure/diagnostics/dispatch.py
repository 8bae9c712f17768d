"""What a decoding step launches: ATen ops dispatched per step, by phase, outside and inside graphed forwards.

In eager CUDA nearly every ATen op that is not a view is one kernel launch (plus PyTorch's dispatcher and the
CUDA runtime's call on the host): a step that dispatches 300 ops pays for 300 launches whatever the model costs.
A forward replayed from a CUDA graph is one launch however many ops it holds. ``DispatchCounter`` (a
``TorchDispatchMode``) counts every op a generation dispatches and books it

- to the graph (``graph``) when it runs inside a graphed forward's body (``harness.backend.cuda_graphs.
  graphed_region``): on a GPU that body runs at capture only and is replayed afterwards; on the CPU (graphs are
  emulated with ``capture=False``) it runs every time, and this is what it would not launch under capture;
- else to the phase of the step it runs in: ``target`` (the target's forwards outside a graph), ``drafter``,
  ``tree`` (the adapter's drafting outside its drafter forwards: tree building, top-k, masks), ``verify``
  (verification and sampling), ``host`` (the engine's and the adapter's bookkeeping: cache edits, counters,
  commit, the sequence).

Each op is a ``view`` (no kernel: ``view``, ``slice``, ``unsqueeze``, ...), a ``sync`` (one that makes the host
wait for the device: ``_local_scalar_dense`` (``.item()``, ``bool(t)``), ``nonzero``, ``masked_select``, indexing
with a boolean mask, a copy from a device to the host) or an ``op`` (a kernel launch, roughly). The phase clock's
boundaries are counted too (``clock_events``: one CUDA event each on a GPU): the timing's own per-step work.

``dispatch_per_step`` runs one counted generation (after an untimed one that captures any graph on a GPU) and
returns the counts per decoding step (the prefill excluded). ``python -m harness measure dispatch`` prints the
table for every catalog method's main variant on a small random model (docs/engine.md holds one), and the bare
graph-replay loop's figure beside it (``harness.measure.diagnostics.bare_loop``).
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.backend.cuda_graphs import GRAPHED_REGION
from harness.backend.models import LoadedModel, load_model
from harness.backend.phases import PhaseClock
from harness.catalog import entry, method_names
from harness.engine.adapter import DraftAdapter
from harness.engine.loop import Generation, generate, generation_steps
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.measure.diagnostics.host_sync import audit_generation
from harness.measure.method_runs import save_random_models
from harness.measure.diagnostics.op_profile import profile_ops
from harness.measure.diagnostics.replay_loop import ReplayLoop
from harness.options import parse_key_values, parse_options
from harness.store.atomic import write_csv
from harness.verify.sampling import SamplingConfig, make_generator

STEP_PHASES = ("target", "drafter", "tree", "verify", "host")  # where an op outside a graph is booked
KINDS = ("op", "sync", "view")
SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::nonzero_static", "aten::masked_select",
                      "aten::unique_consecutive", "aten::_unique2", "aten::equal", "aten::is_nonzero"})
COPIES = frozenset({"aten::_to_copy", "aten::copy_"})
INDEXING = frozenset({"aten::index.Tensor", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_"})


def _tensors(values) -> Iterator[torch.Tensor]:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensors(value)


def op_kind(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> str:
    """``view``, ``sync`` or ``op`` (see the module docstring)."""
    if func.is_view:
        return "view"
    name = func.name()
    base = name.split(".")[0]
    if base in SYNC_OPS or name in SYNC_OPS:
        return "sync"
    if name.split(".")[0] + ".Tensor" in INDEXING or base in INDEXING or name in INDEXING:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(t.dtype == torch.bool for t in _tensors(indices if isinstance(indices, (list, tuple)) else [indices])):
            return "sync"
    if base in COPIES:
        tensors = list(_tensors(args))
        device = kwargs.get("device")
        source = tensors[0] if base == "aten::_to_copy" else (tensors[1] if len(tensors) > 1 else None)
        destination = (torch.device(device) if device is not None else source.device) if base == "aten::_to_copy" \
            else tensors[0].device
        if source is not None and source.device.type != "cpu" and destination.type == "cpu":
            return "sync"
    return "op"


class PhasedDispatchMode(TorchDispatchMode):
    """A dispatch mode that knows which phase of the step runs: ``within(phase)`` while it runs, "host" outside."""

    def __init__(self) -> None:
        super().__init__()
        self.stack = ["host"]

    @contextmanager
    def within(self, phase: str) -> Iterator[None]:
        self.stack.append(phase)
        try:
            yield
        finally:
            self.stack.pop()


class DispatchCounter(PhasedDispatchMode):
    """Counts every dispatched ATen op by (phase, kind) and by (phase, op name); ``phase`` follows the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter = Counter()
        self.names: Counter = Counter()
        self.clock_events = 0
        self.counting = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.counting:
            phase = "graph" if GRAPHED_REGION.get() else self.stack[-1]
            self.counts[(phase, op_kind(func, args, kwargs))] += 1
            self.names[(phase, func.name())] += 1
        return func(*args, **kwargs)

    def restart(self) -> None:
        self.counts.clear()
        self.names.clear()
        self.clock_events = 0
        self.counting = True


class CountingClock(PhaseClock):
    """The generation's phase clock (it still times, CUDA events and all) telling the counter which phase runs."""

    def __init__(self, device: torch.device, counter: DispatchCounter) -> None:
        self.counter = counter
        super().__init__(device)

    def _close_segment(self) -> None:
        self.counter.clock_events += 1
        super()._close_segment()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        with super().phase(name), self.counter.within("target" if name == "prefill" else name):
            yield

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        with self.counter.within(name):
            yield


@dataclass(frozen=True)
class StepDispatch:
    """Per decoding step: ops outside graphs by phase and kind, ops inside graphed forwards, clock boundaries."""

    steps: int
    outside: dict[tuple[str, str], float]  # (phase, kind) -> per step
    graph: float  # ops inside graphed forwards (not launched per step under capture)
    clock_events: float
    top: list[tuple[str, float]]  # the most dispatched ops outside graphs, "phase:op" -> per step

    def total(self, kinds: tuple[str, ...] = ("op", "sync")) -> float:
        """Ops outside graphs per step (views excluded by default: they launch nothing)."""
        return sum(value for (_, kind), value in self.outside.items() if kind in kinds)

    def phase(self, name: str, kinds: tuple[str, ...] = ("op", "sync")) -> float:
        return sum(value for (phase, kind), value in self.outside.items() if phase == name and kind in kinds)

    @property
    def syncs(self) -> float:
        return sum(value for (_, kind), value in self.outside.items() if kind == "sync")


def counted_generation(target: LoadedModel, adapter: DraftAdapter, prompt: torch.Tensor, new_tokens: int,
                       sampling: SamplingConfig, runtime: EngineRuntime, counter: DispatchCounter,
                       generator: torch.Generator | None = None) -> Generation:
    """One generation under ``counter``, counting from the first decoding step (the prefill excluded)."""
    steps = generation_steps(target, adapter, prompt, new_tokens, sampling, generator=generator, runtime=runtime,
                             clock=lambda device: CountingClock(device, counter))
    counter.counting = False
    with counter:
        try:
            next(steps)  # the prefill
            counter.restart()
            while True:
                next(steps)
        except StopIteration as done:
            counter.counting = False
            return done.value


def dispatch_per_step(target: LoadedModel, adapter: DraftAdapter, prompt: torch.Tensor, new_tokens: int,
                      sampling: SamplingConfig, runtime: EngineRuntime,
                      make_generator: Callable[[], torch.Generator | None] = lambda: None,
                      top: int = 8) -> StepDispatch:
    """Ops per decoding step of ``adapter`` in the steady state: an untimed generation first, so that a GPU's captures
    and the first generation's one-time work (graph buffers, caches) are not counted."""
    counter = DispatchCounter()
    counted_generation(target, adapter, prompt, new_tokens, sampling, runtime, counter, make_generator())
    result = counted_generation(target, adapter, prompt, new_tokens, sampling, runtime, counter, make_generator())
    steps = max(len(result.counters.step_tokens) - 1, 1)
    outside = {key: value / steps for key, value in counter.counts.items() if key[0] != "graph"}
    graph = sum(value for key, value in counter.counts.items() if key[0] == "graph") / steps
    names = Counter({f"{phase}:{name}": value / steps for (phase, name), value in counter.names.items()
                     if phase != "graph"})
    return StepDispatch(steps, outside, graph, counter.clock_events / steps, names.most_common(top))


def replay_floor_per_step(lm: LoadedModel, prompt: torch.Tensor, new_tokens: int) -> StepDispatch:
    """The same counts for the engine's floor (``harness.measure.diagnostics.replay_loop``, reading each token)."""
    loop = ReplayLoop(lm, prompt.shape[-1] + new_tokens)
    loop.decode(prompt, new_tokens, read_each_token=True)  # captures on a GPU
    counter = DispatchCounter()
    steps = loop.decode_steps(prompt, new_tokens, read_each_token=True)
    with counter:
        next(steps)  # the prefill
        counter.restart()
        for _ in steps:
            pass
    counter.counting = False
    outside = {key: value / (new_tokens - 1) for key, value in counter.counts.items() if key[0] != "graph"}
    graph = sum(value for key, value in counter.counts.items() if key[0] == "graph") / (new_tokens - 1)
    return StepDispatch(new_tokens - 1, outside, graph, 0.0, [])


CUDA_LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC")
CUDA_COLUMNS = {"kernel_launches": CUDA_LAUNCHES, "graph_launches": ("cudaGraphLaunch",),
                "memcpy": ("cudaMemcpyAsync",), "event_records": ("cudaEventRecord", "cudaEventRecordWithFlags"),
                "synchronize": ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")}


def cuda_calls_per_step(run: Callable[[], Generation], device: torch.device) -> dict[str, float]:
    """On a GPU: the CUDA runtime's calls per decoding step of one generation, from the profiler (kernel launches
    outside graphs, graph launches, copies, event records, synchronisations; the prefill included)."""
    generations: list[Generation] = []
    profiled = profile_ops(lambda: generations.append(run()), device)
    steps = max(len(generations[0].counters.step_tokens) - 1, 1)
    return {column: sum(cost.calls for name, cost in profiled.ops.items() if name in names) / steps
            for column, names in CUDA_COLUMNS.items()}


def random_zoo(root: Path, methods: list[str], dtype: str = "float32", device: str = "cpu",
               vocab: int = 512) -> tuple[LoadedModel, LoadedModel, dict[str, Path]]:
    """A random 4-layer target, a random 2-layer draft LM and every method's drafter, fresh from its trainer
    (0 steps; ``save_random_models``), loaded in ``dtype`` on ``device``."""
    drafters = save_random_models(root, [method for method in methods if entry(method).needs_drafter], vocab)
    return (load_model(str(root / "target"), dtype, device, with_tokenizer=False),
            load_model(str(root / "draft"), dtype, device, with_tokenizer=False), drafters)


def table_row(name: str, counts: StepDispatch, syncs: float, cuda: dict[str, float] | None = None
              ) -> dict[str, object]:
    """One line of the table; ``syncs``: host synchronisations per step (``harness.measure.diagnostics.host_sync``'s
    prediction on a CPU, where a read of a host tensor dispatches nothing)."""
    row: dict[str, object] = {"variant": name, "steps": counts.steps, "ops_outside_graphs": round(counts.total(), 1),
                              **{phase: round(counts.phase(phase), 1) for phase in STEP_PHASES},
                              "syncs": round(max(syncs, counts.syncs), 2), "views": round(counts.total(("view",)), 1),
                              "ops_in_graphs": round(counts.graph, 1), "clock_events": round(counts.clock_events, 1)}
    if cuda is not None:
        row.update({column: round(value, 1) for column, value in cuda.items()})
    return row


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", help="comma-separated catalog methods (default: every one)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--engine", action="append", metavar="KEY=VALUE",
                        help="engine switches (default: kv_cache=static cuda_graphs=on, graphs emulated on a CPU)")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)
    methods = args.methods.split(",") if args.methods else method_names()
    unknown = sorted(set(methods) - set(method_names()))
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; the catalog: {', '.join(method_names())}")
    switches = {"kv_cache": "static", "cuda_graphs": "on", **parse_key_values(args.engine)}
    engine = parse_options(EngineOptions, switches, "the engine (--engine)")
    device = torch.device(args.device)
    sampling = SamplingConfig(args.temperature)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        target, draft, drafters = random_zoo(Path(scratch), methods, args.dtype, args.device)
        host = torch.Generator(device="cpu").manual_seed(1)  # host: the prompt, the same on every device
        prompt = torch.randint(0, target.vocab_size, (1, 24), generator=host).to(device)  # host: drawn, then moved
        floor = replay_floor_per_step(target, prompt, args.new_tokens)
        rows.append(table_row("(replay floor)", floor, 1.0))  # its one read per token
        for method in methods:
            item = entry(method)
            adapter, _ = build_adapter(method, {}, BuildInputs(target, draft if item.needs_draft else None,
                                                               drafters.get(method)))
            runtime = EngineRuntime(target, engine, capture=device.type == "cuda")
            generator = lambda: make_generator(0, device)  # noqa: E731 - each generation the same draws
            counts = dispatch_per_step(target, adapter, prompt, args.new_tokens, sampling, runtime, generator)
            cuda = None
            if device.type == "cuda":
                cuda = cuda_calls_per_step(lambda: generate(target, adapter, prompt, args.new_tokens, sampling,
                                                            generator=generator(), runtime=runtime), device)
            audit = audit_generation(target, adapter, prompt, args.new_tokens, sampling, runtime, generator())
            rows.append(table_row(method, counts, audit.per_step, cuda))
            print(f"{method}: {counts.total():.1f} ops outside graphs per step; top: "
                  + ", ".join(f"{name} {value:.1f}" for name, value in counts.top[:5]), flush=True)
    header = list(rows[-1])
    print(f"\nATen ops per decoding step outside graphed forwards ({device}, {args.dtype}, engine "
          f"{switches}, T = {args.temperature}; views excluded from the totals)")
    print("  ".join(f"{name:>12}" for name in header))
    for row in rows:
        print("  ".join(f"{row.get(name, '')!s:>12}" for name in header))
    if args.out:
        write_csv(args.out, rows, header, extra="ignore")


if __name__ == "__main__":
    main()
