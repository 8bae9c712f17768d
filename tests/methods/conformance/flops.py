"""The conformance suite's drafter-FLOP check (``test_drafter_flops_booked_are_those_it_ran``, test_greedy.py): the
drafter FLOPs a method books against what its drafter ran, on the greedy runs the suite already makes.

Each of a case's greedy generations runs with ``DrafterWork.charge`` adding up what it is charged (``booking``), and
the start of its first one also under a ``FlopAudit``: a ``TorchDispatchMode`` counting the FLOPs of every matrix
product and attention op (``harness.training.flops``' table: torch's, the CPU's fused attention added; and
``INFERENCE_OPS``) by the phase the generation's clock is in (not the second order of a hedgespec pair, whose
experts' forwards the first order counts). What runs outside the target's phases (``TARGET_PHASES``: its forwards,
verification) is the drafter's: its forwards and logits (``drafter``), and any drafter work a method runs outside
that phase (a feature projection in ``commit``, timed as ``host``). ``check_drafter_flops`` then holds, per case,

- ran: the drafter FLOPs its counters hold (``counters.drafter``: the analytic estimate, 2 x parameters x tokens +
  attention, that every drafter-FLOP metric divides by) equal what torch counted its drafter running, within
  ``TALLY_TOLERANCE`` (the first generation's prefill and first ``COUNTED_STEPS`` decoding steps);
- booked: what it charged to ``DrafterWork`` plus what it counted useful outright (``count_useful_drafter_flops``,
  context work) equals the drafter FLOPs its counters hold, within ``BOOKED_TOLERANCE`` (every generation). Every
  drafter FLOP is booked once: useful whatever is accepted, or a unit's work that its ``commit`` settles or
  forgets. Work left unbooked is useful nowhere: the drafter-FLOP waste reads too high (a chain of three draft
  steps booking only its first reads a waste of 2/3 where it wasted nothing).

``FLOP_OVER_ESTIMATES``: the cases whose FLOP model over-estimates by its stated rule; for them only a count below
what ran fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch.utils.flop_counter import sdpa_flop_count

from harness.analysis.metrics import SETTLED_DRAFTER_FLOPS, USEFUL_DRAFTER_FLOPS
from harness.backend.models import LoadedModel
from harness.backend.phases import PhaseClock
from harness.engine.adapter import DraftAdapter
from harness.engine.counters import DrafterWork
from harness.engine.loop import Generation, generation_steps
from harness.measure.diagnostics.dispatch import PhasedDispatchMode
from harness.training.flops import flop_counter
from harness.verify.sampling import SamplingConfig

TALLY_TOLERANCE = 0.05  # the analytic estimate against torch's count: the estimate's 2 x parameters includes norms'
# weights and biases, elementwise work torch's table leaves out (measured on the Markov zoo: within 1% for every case)
BOOKED_TOLERANCE = 0.02  # booked against the counters: a forward's FLOPs are split over its units, not estimated
# again (measured: equal but for rounding in every case)
TARGET_PHASES = ("prefill", "target", "verify")  # the target's forwards and verification: no drafter work
COUNTED_STEPS = 8  # decoding steps torch counts (after the prefill): a counted op costs about 3x an uncounted one

# Cases (a method, a draft-vocabulary case, or an expert of a hedgespec pair) whose FLOP model books more than runs,
# by a rule its code states: only an under-count fails for them (measured on the Markov zoo's greedy runs).
FLOP_OVER_ESTIMATES = {
    "dflash": "DFlashDrafter.cost costs a context row as a full row, though context rows skip the queries and the MLP "
              "(1.20x to 1.27x)",  # documented in its docstring
    "dspark": "dflash's drafter and FLOP model, context rows costed as full rows (1.25x to 1.36x)",
    "eagle3+vocab": "Eagle3Head.cost costs fc (three target features to one) on every fed row, but tree rows feed the "
                    "head's own state, not fc (1.18x)",
}


def product_flops(a: torch.Tensor, b: torch.Tensor, *args, out_val: torch.Tensor, **kwargs) -> int:
    """``linear`` and ``matmul``: 2 x the output's elements x the contracted width (a bias is not counted, as torch's
    ``addmm`` count has it)."""
    return 2 * out_val.numel() * a.shape[-1]


def attention_flops(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args, **kwargs) -> int:
    return sdpa_flop_count(query.shape, key.shape, value.shape)


# Under torch.inference_mode (every generation) composite ops reach a dispatch mode whole, not decomposed into the
# ``mm``/``bmm`` torch's table counts: these are counted here, and the rarer products decomposed (``DECOMPOSED``).
INFERENCE_OPS = {torch.ops.aten.linear: product_flops, torch.ops.aten.matmul: product_flops,
                 torch.ops.aten.scaled_dot_product_attention: attention_flops}
DECOMPOSED = frozenset({torch.ops.aten.einsum, torch.ops.aten.bilinear, torch.ops.aten.tensordot})


class FlopAudit(PhasedDispatchMode):
    """FLOPs of matrix products and attention by phase (``within``), and the FLOPs charged to ``DrafterWork``
    (``booking``)."""

    def __init__(self) -> None:
        super().__init__()
        self.registry = {**flop_counter().flop_registry, **INFERENCE_OPS}
        self.flops: Counter = Counter()
        self.charged = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._overloadpacket in DECOMPOSED:
            out = func.decompose(*args, **kwargs)  # its products dispatch again, through this mode
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        count = self.registry.get(func._overloadpacket)
        if count is not None:
            self.flops[self.stack[-1]] += count(*args, **kwargs, out_val=out)
        return out

    @contextmanager
    def booking(self) -> Iterator[None]:
        """``DrafterWork.charge`` (every instance's, a subclass's through ``super()``) adds what it is charged to
        ``charged`` as well."""
        charge = DrafterWork.charge

        def counted(work: DrafterWork, units: list, flops: float) -> None:
            self.charged += float(flops)
            charge(work, units, flops)

        DrafterWork.charge = counted
        try:
            yield
        finally:
            DrafterWork.charge = charge

    @property
    def drafter(self) -> float:
        """FLOPs outside the target's phases: the drafter's."""
        return float(sum(flops for phase, flops in self.flops.items() if phase not in TARGET_PHASES))


class AuditClock(PhaseClock):
    """The generation's phase clock (it still times) telling the audit which phase runs."""

    def __init__(self, device: torch.device, audit: FlopAudit) -> None:
        self.audit = audit
        super().__init__(device)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        with super().phase(name), self.audit.within(name):
            yield


@dataclass(frozen=True)
class DrafterFlops:
    """One generation's drafter FLOPs: in its counters (``tally``), charged to ``DrafterWork``, counted useful
    outright (``context``); and as torch counted them over its first decoding steps (``counted``; None when not
    counted) with what its counters held then (``counted_tally``)."""

    tally: float
    charged: float
    context: float
    counted: float | None = None
    counted_tally: float = 0.0

    @property
    def booked(self) -> float:
        return self.charged + self.context


def audited_generation(target: LoadedModel, adapter: DraftAdapter, prompt: torch.Tensor, new_tokens: int,
                       sampling: SamplingConfig, generator: torch.Generator | None = None, count: bool = True,
                       counted_steps: int = COUNTED_STEPS) -> tuple[Generation, DrafterFlops]:
    """``generate``, its charges added up and (``count``) the FLOPs of its prefill and first ``counted_steps``
    decoding steps counted by torch (``tally`` and ``counted`` then cover those steps alone): the generation (the
    same tokens and counters as without) and its drafter FLOPs."""
    audit = FlopAudit()
    clock = (lambda device: AuditClock(device, audit)) if count else PhaseClock
    steps = generation_steps(target, adapter, prompt, new_tokens, sampling, generator=generator, clock=clock)
    tally = None
    with audit.booking():
        try:
            if count:
                with audit:  # entered and left between steps, where no inference mode is held
                    for _ in range(counted_steps + 1):  # the prefill, then the decoding steps
                        next(steps)
                tally = steps.gi_frame.f_locals["counters"].drafter.flops  # the suspended generation's counters
            while True:
                next(steps)
        except StopIteration as done:
            result = done.value
    counters = result.counters
    context = counters.extra.get(USEFUL_DRAFTER_FLOPS, 0.0) - counters.extra.get(SETTLED_DRAFTER_FLOPS, 0.0)
    if tally is None:  # not counted, or done within the counted steps
        tally = counters.drafter.flops
    return result, DrafterFlops(counters.drafter.flops, audit.charged, context, audit.drafter if count else None,
                                tally)


def over_estimate(case: str, method: str) -> str | None:
    """Why ``case`` (of catalog method ``method``) books more drafter FLOPs than run (``FLOP_OVER_ESTIMATES``: the
    case, its method or family, or an expert of its hedgespec pair), or None."""
    names = [case, method, *case.partition(":")[2].split(",")]
    return next((FLOP_OVER_ESTIMATES[name] for name in names if name in FLOP_OVER_ESTIMATES), None)


def share(part: float, whole: float) -> str:
    """``part / whole`` as a percentage, and the simple fraction it is near (``33.4% (about 1/3)``)."""
    value = part / whole
    near = Fraction(value).limit_denominator(4)
    close = 0 < near < 1 and abs(float(near) - value) < 0.02
    return f"{value:.1%}" + (f" (about {near})" if close else "")


def check_drafter_flops(case: str, runs: list[DrafterFlops], why_over: str | None = None) -> None:
    """The drafter FLOPs ``case`` booked equal what its drafter ran (see the module docstring); ``why_over``: its
    FLOP model over-estimates by that rule, so only an under-count fails."""
    audited = [run for run in runs if run.counted is not None]
    tally, counted = sum(run.counted_tally for run in audited), sum(run.counted for run in audited)
    if counted > 0 or tally > 0:
        low = tally < (1 - TALLY_TOLERANCE) * counted
        high = tally > (1 + TALLY_TOLERANCE) * counted and why_over is None
        assert not (low or high), (
            f"{case}'s counters hold {tally:.4g} drafter FLOPs, {share(tally, counted) if counted else 'all'} of the "
            f"{counted:.4g} torch counted its drafter running (within {TALLY_TOLERANCE:.0%}; first generation, prefill "
            f"and first {COUNTED_STEPS} steps): count "
            f"every drafter forward, once, with run_model(..., ctx.counters.drafter) or ctx.counters.drafter.add "
            f"(docs/extending.md, *The adapter*)")
    tally, booked = sum(run.tally for run in runs), sum(run.booked for run in runs)
    if tally > 0 or booked > 0:
        charged, context = sum(run.charged for run in runs), sum(run.context for run in runs)
        assert abs(booked - tally) <= BOOKED_TOLERANCE * tally, (
            f"{case} booked {share(booked, tally) if tally else 'more than all'} of the drafter FLOPs it ran "
            f"({booked:.4g} of {tally:.4g}: {charged:.4g} charged to DrafterWork, {context:.4g} counted useful "
            f"outright): its drafter-FLOP waste reads wrong. Book each forward's FLOPs once, every draft step's: "
            f"DrafterWork.charge in propose (settled in commit), or count_useful_drafter_flops for context work "
            f"(docs/extending.md, *The adapter*)")
