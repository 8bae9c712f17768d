"""Host-synchronisation audit: where a decoding step would make the host wait for a GPU, predicted on any device.

``HostReadCounter`` (a TorchFunctionMode) watches every torch call and counts,
by the phase of the step it happens in (the adapter's drafting ``propose``, the
target's forward ``forward``, the verification ``verify``, the adapter's
bookkeeping ``commit``, the engine's own code ``engine``), the calls that
synchronise host and GPU:

- a read of a device tensor's value on the host (``.item()``, ``.tolist()``,
  ``bool(t)``, ``.cpu()``, ... : ``HOST_READS``), counted under its name;
- a blocking host-to-device copy of host data (``host_t.to(dev)``, ``.cuda()``,
  ``device_t.copy_(host_t)``, ``torch.tensor(data, device=dev)``,
  ``torch.as_tensor(data, device=dev)``, ``device_t.new_tensor(data)``):
  ``h2d:<name>``; a blocking device-to-host ``host_t.copy_(device_t)``: ``d2h:copy_``;
- an op mixing a host tensor of one or more dimensions with a device tensor
  (``device_t[host_index]``, ``device_t[host_index] = v``): PyTorch copies the
  host tensor over first: ``h2d:implicit:<name>``. 0-dim host tensors are
  passed to kernels as scalars and cost nothing.

Where tensors live is emulated, so a CPU run predicts a GPU run. Host-made
tensors: results of calls with no tensor argument and no ``device`` argument
(factories: ``torch.tensor([...])``, ``torch.zeros(n)``, ...), of calls whose
tensor arguments are all host-made (views and arithmetic included) and of
``.cpu()``. Everything else is device-made: the results of calls given an
explicit ``device`` (whatever its value: on a CPU run the device *is* the
CPU), of ``.to(device)``/``.cuda()``, and of calls touching a device-made
tensor, and every tensor made before the counter started (model weights, the
prompt, the static cache; ``audit_generation`` empties ``harness.trees.tree``'s cache
of host-made ancestor matrices first). So ``.to("cpu")`` counts as a copy to
the device: use ``.cpu()``. Reading a host-made tensor is free and not counted.
A copy with ``non_blocking=True`` is assumed to come from pinned memory and is
not counted. Where a copy would return its own source on the CPU, the counter
returns a clone, so source and copy keep their own homes. Not seen: ops whose
output size depends on device values (``device_t[device_mask]``,
``masked_select``), which also synchronise.

Also not seen: synchronisations inside PyTorch's own kernels' host code
(``torch.multinomial`` checks its input on the host, for one). On a CUDA
device ``audit_generation`` therefore also takes PyTorch's own report
(``torch.cuda.set_sync_debug_mode("warn")`` warns at every synchronising CUDA
call) and counts it per step by phase: ``cuda_reported``, the measured
figure next to the prediction.

``audit_generation`` runs one generation under a counter and returns counts
per step by phase and by operation; with ``where=True`` also the call sites
(the source lines of this repository) that made them.
"""

from __future__ import annotations

import contextlib
import linecache
import sys
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from harness.trees import tree as tree_module
from harness.engine.adapter import DraftAdapter
from harness.engine.loop import generate
from harness.backend.models import LoadedModel
from harness.verify.sampling import SamplingConfig
from harness.engine.runtime import EngineRuntime
from harness.verify.token_level import verify_tree

HOST_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy",
                        "nonzero", "unique", "equal", "allclose", "__format__", "__repr__"})
COPIES = frozenset({"to", "cuda", "copy_", "tensor", "as_tensor", "asarray", "new_tensor"})
RETURN_SOURCE = frozenset({"to", "cuda", "as_tensor", "asarray", "cpu"})  # on the CPU these may return their input
PHASES = ("propose", "forward", "verify", "commit", "engine")
CUDA_SYNC_WARNING = "synchronizing CUDA operation"  # in PyTorch's warning under set_sync_debug_mode("warn")
ROOT = Path(__file__).resolve().parents[3]


def _tensors_in(values: Iterable) -> list[torch.Tensor]:
    """The tensors among ``values``, looking into lists and tuples (indices, ``torch.cat`` inputs)."""
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_tensors_in(value))
    return found


def _tensor_results(result) -> list[torch.Tensor]:
    """The tensors a call returned: the result, or the tensors of a returned tuple (``topk``, ``split``, ...)."""
    if isinstance(result, torch.Tensor):
        return [result]
    return [item for item in result if isinstance(item, torch.Tensor)] if isinstance(result, tuple) else []


def _copy_source(name: str, args: tuple, kwargs: dict):
    """What a copy reads: a tensor, or host data (lists, numbers, arrays)."""
    if name in ("to", "cuda"):
        return args[0]
    if name in ("copy_", "new_tensor"):
        return args[1] if len(args) > 1 else kwargs.get("src", kwargs.get("data"))
    return args[0] if args else kwargs.get("data", kwargs.get("obj"))


def _non_blocking(args: tuple, kwargs: dict) -> bool:
    """``non_blocking=True``, by keyword or as the first positional bool (``.to``, ``.cuda``, ``copy_``)."""
    return bool(kwargs.get("non_blocking", next((a for a in args[1:] if isinstance(a, bool)), False)))


@lru_cache(maxsize=None)
def _source_path(filename: str) -> tuple[str, bool] | None:
    """A frame's file, shortened, and whether it is this repository's; None for torch's code and this module."""
    path = Path(filename)
    if "site-packages" in path.parts:
        short = Path(*path.parts[path.parts.index("site-packages") + 1:])
        return None if short.parts[0] == "torch" else (short.as_posix(), False)
    if path == Path(__file__) or not path.is_relative_to(ROOT) or path.relative_to(ROOT).parts[0].startswith("."):
        return None
    return path.relative_to(ROOT).as_posix(), True


def call_site(frames: int = 3) -> str:
    """Where the current torch call comes from: the innermost caller outside torch (with its source line), then
    up to ``frames`` frames of this repository's code, innermost first."""
    found: list[str] = []
    in_repo = 0
    frame = sys._getframe(1)
    while frame is not None and in_repo < frames:
        source = _source_path(frame.f_code.co_filename)
        if source is not None and (source[1] or not found):
            where = f"{source[0]}:{frame.f_lineno} {frame.f_code.co_name}"
            if not found:
                where += f": {linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()}"
            found.append(where)
            in_repo += source[1]
        frame = frame.f_back
    return " <- ".join(found) or "(unknown)"


@dataclass
class HostReadCounter(TorchFunctionMode):
    """Counts host synchronisations by phase (``phase`` is set by the caller) and operation (module docstring).

    where: also record, per (phase, operation), the source lines that made them (``sites``; slower).
    """

    phase: str = "engine"
    counts: Counter = field(default_factory=Counter)
    where: bool = False
    sites: defaultdict = field(default_factory=lambda: defaultdict(Counter))
    _host: WeakIdKeyDictionary = field(default_factory=WeakIdKeyDictionary, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__init__()

    def on_host(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` was made on the host (under this counter)."""
        return tensor in self._host

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        inputs = _tensors_in(args) + _tensors_in(kwargs.values())
        result = func(*args, **kwargs)
        event, result_on_host = self._classify(name, args, kwargs, inputs, result)
        if event is not None:
            self.counts[(self.phase, event)] += 1
            if self.where:
                self.sites[(self.phase, event)][call_site()] += 1
        return self._settle(name, result, inputs, result_on_host)

    def _settle(self, name: str, result, inputs: list[torch.Tensor], on_host: bool):
        """Record the home of ``result``'s tensors (only host-made ones are recorded); a copy that handed back its
        own input (a CPU no-op) is replaced by a clone, so source and copy each keep their home."""
        if name in RETURN_SOURCE and any(result is tensor for tensor in inputs) and self.on_host(result) != on_host:
            result = result.clone()
        if on_host:
            for tensor in _tensor_results(result):
                self._host[tensor] = True
        return result

    def _classify(self, name: str, args: tuple, kwargs: dict, inputs: list[torch.Tensor], result
                  ) -> tuple[str | None, bool]:
        """The synchronisation a call makes (None: none) and whether its tensor results live on the host."""
        if name in COPIES:
            return self._classify_copy(name, args, kwargs, result)
        host_inputs = [tensor for tensor in inputs if self.on_host(tensor)]
        on_device = len(host_inputs) < len(inputs)
        if name in HOST_READS:
            return (name if on_device else None), name == "cpu" or not on_device
        if on_device and any(tensor.ndim > 0 for tensor in host_inputs):
            return f"h2d:implicit:{name}", False
        return None, not on_device and kwargs.get("device") is None

    def _classify_copy(self, name: str, args: tuple, kwargs: dict, result: torch.Tensor) -> tuple[str | None, bool]:
        """``_classify`` for copies: ``h2d:`` (``d2h:``) when a blocking copy takes host (device) data to the device
        (host). Empty copies move nothing and do not synchronise."""
        source = _copy_source(name, args, kwargs)
        source_on_host = all(self.on_host(tensor) for tensor in _tensors_in([source]))
        target_on_host = self._copy_target_on_host(name, args, kwargs, source_on_host)
        if target_on_host == source_on_host or _non_blocking(args, kwargs) or result.numel() == 0:
            return None, target_on_host
        return ("h2d:" if source_on_host else "d2h:") + name, target_on_host

    def _copy_target_on_host(self, name: str, args: tuple, kwargs: dict, source_on_host: bool) -> bool:
        """Where a copy's result (``copy_``: its destination) lives: on the device when given an explicit device."""
        if name == "copy_":
            return self.on_host(args[0])
        if name == "cuda" or kwargs.get("device") is not None:
            return False
        if name == "new_tensor":
            return self.on_host(args[0])
        for arg in args[1:] if name == "to" else ():
            if isinstance(arg, torch.Tensor):
                return self.on_host(arg)
            if isinstance(arg, (torch.device, str)) or type(arg) is int:
                return False
        return source_on_host


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


class _PhasedView:
    """``wrapped`` itself for everything (a cache the runtime grows or a graph it captures stays its own), with the
    calls named in ``phases`` labelled: method name -> phase (a name ``wrapped`` lacks is left out)."""

    def __init__(self, wrapped: object, counter: HostReadCounter, phases: dict[str, str]) -> None:
        self._wrapped = wrapped
        for name, phase in phases.items():
            if hasattr(wrapped, name):
                setattr(self, name, _Phased(counter, phase, getattr(wrapped, name)))

    def __getattr__(self, name: str):
        return getattr(self._wrapped, name)


# the decoding loop starts after begin; observe_root is optional
_ADAPTER_PHASES = {"begin": "prefill", "propose": "propose", "commit": "commit", "observe_root": "propose"}
_RUNTIME_PHASES = {"verify": "forward"}  # the target's verify forward


@dataclass(frozen=True)
class HostReadAudit:
    """Host synchronisations per decoding step. Operations: ``HOST_READS`` names (reads of device values),
    ``h2d:...`` (host-to-device copies, explicit or implicit) and ``d2h:copy_``."""

    steps: int
    by_phase: dict[str, float]  # synchronisations per step
    by_operation: dict[str, float]  # "phase:op" -> synchronisations per step
    sites: dict[str, dict[str, float]] = field(default_factory=dict)  # where=True: "phase:op" -> call site -> per step
    cuda_reported: dict[str, float] | None = None  # on CUDA: PyTorch's own sync reports per step, by phase

    @property
    def cuda_reported_per_step(self) -> float | None:
        """Synchronising CUDA calls per step as PyTorch reports them (None off CUDA)."""
        return None if self.cuda_reported is None else sum(self.cuda_reported.values())

    @property
    def per_step(self) -> float:
        return sum(self.by_phase.values())

    @property
    def h2d_per_step(self) -> float:
        """Host-to-device copies per step."""
        return sum(value for key, value in self.by_operation.items() if _is_h2d(key))

    @property
    def reads_per_step(self) -> float:
        """Reads of device values (``HOST_READS``, ``d2h:copy_``) per step."""
        return sum(value for key, value in self.by_operation.items() if not _is_h2d(key))


def _is_h2d(operation: str) -> bool:
    """Whether a "phase:op" key counts host-to-device copies."""
    return operation.split(":")[1] == "h2d"


def audit_generation(target: LoadedModel, adapter: DraftAdapter, prompt_ids: torch.Tensor, max_new_tokens: int,
                     sampling: SamplingConfig, runtime: EngineRuntime | None = None,
                     generator: torch.Generator | None = None, where: bool = False) -> HostReadAudit:
    """Host synchronisations per decoding step of one generation (prefill excluded), by phase and by operation;
    with ``where``, also by call site."""
    runtime = runtime or EngineRuntime(target)
    counter = HostReadCounter(phase="prefill", where=where)
    phased_runtime = _PhasedView(runtime, counter, _RUNTIME_PHASES)
    adapter_view = _PhasedView(adapter, counter, _ADAPTER_PHASES)
    tree_module._ancestor_matrix.cache_clear()  # cached host tensors made before the audit would pass for device ones
    with counter, cuda_sync_reports(counter, prompt_ids.device) as reported:
        result = generate(target, adapter_view, prompt_ids, max_new_tokens, sampling, generator=generator,
                          verify=_Phased(counter, "verify", verify_tree), runtime=phased_runtime)
    steps = max(len(result.counters.step_tokens) - 1, 1)  # the first entry is the prefill's token
    counts = {key: value for key, value in counter.counts.items() if key[0] != "prefill"}
    by_phase = {phase: sum(v for (p, _), v in counts.items() if p == phase) / steps for phase in PHASES}
    by_operation = {f"{p}:{op}": v / steps for (p, op), v in sorted(counts.items())}
    sites = {f"{p}:{op}": {site: n / steps for site, n in counter.sites[(p, op)].most_common()}
             for (p, op) in sorted(counts) if where}
    cuda_reported = None if reported is None else {phase: reported[phase] / steps for phase in PHASES}
    return HostReadAudit(steps, by_phase, by_operation, sites, cuda_reported)


@contextlib.contextmanager
def cuda_sync_reports(counter: HostReadCounter, device: torch.device) -> Iterator[Counter | None]:
    """On a CUDA ``device``: count, by the counter's phase at the time, PyTorch's warnings of synchronising CUDA
    calls (``set_sync_debug_mode("warn")``); other warnings pass through. Elsewhere: None."""
    if device.type != "cuda":
        yield None
        return
    reported: Counter = Counter()
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():  # restores warnings.showwarning afterwards
        warnings.filterwarnings("always", message=f".*{CUDA_SYNC_WARNING}")  # every one, not just the first
        show = warnings.showwarning

        def record(message, category, filename, lineno, file=None, line=None) -> None:
            if CUDA_SYNC_WARNING in str(message):
                reported[counter.phase] += 1
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield reported
        finally:
            torch.cuda.set_sync_debug_mode(previous)
