"""Host-synchronisation audit: which tensor reads inside a decoding step would stall a GPU.

A read of a tensor's value on the host (``.item()``, ``.tolist()``,
``bool(t)``, ``int(t)``, ``.cpu()``, ...) waits for every kernel queued before
it. ``HostReadCounter`` (a TorchFunctionMode, so it works on any device, CPU
included) counts such reads by the phase of the step they happen in: the
adapter's drafting (``propose``), the target's forward (``forward``), the
verification (``verify``), the adapter's bookkeeping after it (``commit``).
``audit_generation`` runs one generation under it and returns reads per step
by phase and by operation. The verifier's read of the target's choices is the
one read a step cannot avoid (it decides how many tokens were accepted).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode

from harness.adapter import DraftAdapter
from harness.engine import generate
from harness.models import LoadedModel
from harness.sampling import SamplingConfig
from harness.engine_runtime import EngineRuntime
from harness.verify import verify_tree

HOST_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy",
                        "nonzero", "unique", "equal", "allclose", "__format__", "__repr__"})
PHASES = ("propose", "forward", "verify", "commit", "engine")


@dataclass
class HostReadCounter(TorchFunctionMode):
    """Counts host reads of tensor values, by phase (``phase`` is set by the caller) and by operation."""

    phase: str = "engine"
    counts: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.counts[(self.phase, name)] += 1
        return func(*args, **(kwargs or {}))


class _Phased:
    """Runs a callable with the counter's phase set to ``phase``; afterwards the phase is ``then``."""

    def __init__(self, counter: HostReadCounter, phase: str, function, then: str = "engine") -> None:
        self.counter, self.phase, self.function, self.then = counter, phase, function, then

    def __call__(self, *args, **kwargs):
        self.counter.phase = self.phase
        try:
            return self.function(*args, **kwargs)
        finally:
            self.counter.phase = self.then


class _PhasedAdapter:
    """The adapter, with its propose/commit (and observe_root) calls labelled."""

    def __init__(self, adapter: DraftAdapter, counter: HostReadCounter) -> None:
        self._adapter = adapter
        self.begin = _Phased(counter, "prefill", adapter.begin)  # the decoding loop starts after begin
        self.propose = _Phased(counter, "propose", adapter.propose)
        self.commit = _Phased(counter, "commit", adapter.commit)
        if hasattr(adapter, "observe_root"):
            self.observe_root = _Phased(counter, "propose", adapter.observe_root)

    def __getattr__(self, name: str):
        return getattr(self._adapter, name)


@dataclass(frozen=True)
class HostReadAudit:
    steps: int
    by_phase: dict[str, float]  # host reads per step
    by_operation: dict[str, float]  # "phase:op" -> reads per step

    @property
    def per_step(self) -> float:
        return sum(self.by_phase.values())


def audit_generation(target: LoadedModel, adapter: DraftAdapter, prompt_ids: torch.Tensor, max_new_tokens: int,
                     sampling: SamplingConfig, runtime: EngineRuntime | None = None,
                     generator: torch.Generator | None = None) -> HostReadAudit:
    """Host reads per decoding step of one generation (prefill excluded), by phase and by operation."""
    runtime = runtime or EngineRuntime(target)
    counter = HostReadCounter()
    phased_runtime = _PhasedRuntime(runtime, counter)
    adapter_view = _PhasedAdapter(adapter, counter)
    counter.phase = "prefill"
    with counter:
        result = generate(target, adapter_view, prompt_ids, max_new_tokens, sampling, generator=generator,
                          verify=_Phased(counter, "verify", verify_tree), runtime=phased_runtime)
    steps = max(len(result.counters.step_tokens) - 1, 1)  # the first entry is the prefill's token
    counts = {key: value for key, value in counter.counts.items() if key[0] != "prefill"}
    by_phase = {phase: sum(v for (p, _), v in counts.items() if p == phase) / steps for phase in PHASES}
    by_operation = {f"{p}:{op}": v / steps for (p, op), v in sorted(counts.items())}
    return HostReadAudit(steps, by_phase, by_operation)


class _PhasedRuntime(EngineRuntime):
    """A runtime sharing ``runtime``'s state whose verify forward is labelled ``forward``."""

    def __init__(self, runtime: EngineRuntime, counter: HostReadCounter) -> None:
        self.__dict__.update(runtime.__dict__)
        self._counter = counter

    def verify(self, *args, **kwargs):
        return _Phased(self._counter, "forward", super().verify)(*args, **kwargs)
