"""Per-turn counters that every method fills the same way (DESIGN section 5)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from harness.backend.forward import ForwardTally
from harness.backend.phases import NO_CLOCK, PhaseClock
from harness.analysis.metrics import SETTLED_DRAFTER_FLOPS, USEFUL_DRAFTER_FLOPS
from harness.trees.tree import TokenTree
from harness.verify.verdict import Verdict


@dataclass
class GenerationCounters:
    """Raw counts of one generated turn.

    new_tokens: tokens emitted (EOS included, trimmed at EOS and max_new_tokens).
    step_tokens: tokens produced by each target forward before trimming
        (1 for the prefill, accepted drafts + 1 for every verification step).
    step_accepted: accepted draft tokens per verification step (no bonus).
    accepted_by_depth / drafted_by_depth: draft nodes per tree depth (index 0 =
        depth 1) sent to verification, and those accepted.
    extra: method-specific counters (named by the method, summed per turn).
    trace: method-specific per-step values (named by the method, one entry per verification step).
    phase_seconds: the wall time split by phase (``harness.backend.phases``: prefill, target, drafter,
        verify, host), filled when the generation was timed with ``start_clock``.
    """

    new_tokens: int = 0
    wall_seconds: float = 0.0
    prefill_seconds: float = 0.0
    target: ForwardTally = field(default_factory=ForwardTally)
    drafter: ForwardTally = field(default_factory=ForwardTally)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    tried_tokens: int = 0
    step_tokens: list[int] = field(default_factory=list)
    step_accepted: list[int] = field(default_factory=list)
    drafted_by_depth: list[int] = field(default_factory=list)
    accepted_by_depth: list[int] = field(default_factory=list)
    stop_reason: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    trace: dict[str, list[float]] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:  # not a field: records hold the phase times, not the clock
        self.clock: PhaseClock = NO_CLOCK

    def start_clock(self, clock: PhaseClock) -> None:
        """Time this generation's phases on ``clock``: target forwards count as prefill until the first
        token is out (``record_prefill``), drafter forwards as drafter."""
        self.clock = clock
        self.target.timed_by(clock, "prefill")
        self.drafter.timed_by(clock, "drafter")

    def stop_clock(self) -> None:
        """Read the clock (after the generation's timer has read ``wall_seconds``)."""
        if self.clock is not NO_CLOCK:
            self.phase_seconds = self.clock.finish(self.wall_seconds)

    def phase(self, name: str):
        """A context manager timing its block as phase ``name`` (a no-op when nobody times)."""
        return self.clock.phase(name)

    def section(self, name: str):
        """A named part of the host's work (``PhaseClock.section``): timed as ``host``, counted apart."""
        return self.clock.section(name)

    def record_prefill(self) -> None:
        self.step_tokens.append(1)
        self.target.phase = "target"

    def record_step(self, tree: TokenTree, verdict: Verdict) -> None:
        self.drafted_tokens += tree.num_drafts
        self.accepted_tokens += verdict.num_accepted
        self.tried_tokens += verdict.tried
        self.step_accepted.append(verdict.num_accepted)
        self.step_tokens.append(verdict.num_accepted + 1)
        depths = tree.depths
        for node in range(1, tree.size):
            _bump(self.drafted_by_depth, depths[node] - 1)
        for depth in range(1, len(verdict.path)):
            _bump(self.accepted_by_depth, depth - 1)

    def add_extra(self, name: str, amount: float) -> None:
        self.extra[name] = self.extra.get(name, 0) + amount

    def add_trace(self, name: str, value: float) -> None:
        self.trace.setdefault(name, []).append(value)

    @property
    def tokens_per_forward(self) -> float:
        """New tokens per target forward (the prefill counted; bonus tokens included). The reported tau (EAGLE/
        Spec-Bench: accepted length per decoding step, prefill excluded) is ``harness.analysis.summary.tau``."""
        return self.new_tokens / self.target.forwards if self.target.forwards else 0.0

    def as_dict(self) -> dict:
        data = asdict(self)
        data["tokens_per_forward"] = self.tokens_per_forward
        return data


def _bump(values: list[int], index: int) -> None:
    while len(values) <= index:
        values.append(0)
    values[index] += 1


class DrafterWork:
    """Drafter FLOPs of one round, per unit of work (a fed tree node, a backbone state).

    ``charge`` books a forward's FLOPs evenly over the units it computed;
    ``settle`` adds the FLOPs of the units that turned out useful (their output
    reached an accepted token or is reused) to the counters' useful drafter
    FLOPs and forgets the round, but for units carried to the next round
    undecided. Drafter-FLOP waste = 1 - useful / all drafter FLOPs. What ``settle`` books is also counted
    apart (``drafter_settled_flops``): the conformance suite reads it to tell a drafter that books its drafts'
    work from one that books only its context's (``count_useful_drafter_flops``).
    """

    def __init__(self) -> None:
        self.flops: dict[object, float] = {}

    def charge(self, units: list, flops: float) -> None:
        for unit in units:
            self.flops[unit] = self.flops.get(unit, 0.0) + flops / len(units)

    def settle(self, counters: GenerationCounters, useful_units, carried_units=()) -> None:
        """Add the useful units' FLOPs; ``carried_units`` keep theirs for the next round's ``settle`` (work
        whose use that round decides), the rest are forgotten (wasted)."""
        useful = sum(self.flops.get(unit, 0.0) for unit in set(useful_units))
        counters.add_extra(USEFUL_DRAFTER_FLOPS, useful)
        counters.add_extra(SETTLED_DRAFTER_FLOPS, useful)
        carried = set(carried_units)
        self.flops = {unit: flops for unit, flops in self.flops.items() if unit in carried}


def count_useful_drafter_flops(counters: GenerationCounters, flops: float) -> None:
    """Drafter work that is useful whatever is accepted (feeding accepted tokens, context)."""
    counters.add_extra(USEFUL_DRAFTER_FLOPS, flops)


DRAFTING_POSITION = "drafting position"  # the unit of a context forward's last position (``book_drafting_forward``)


def book_drafting_forward(counters: GenerationCounters, work: DrafterWork, flops: float, positions: int,
                          unit: object = DRAFTING_POSITION) -> None:
    """A drafter forward over ``positions`` positions that processed context AND drafted: its last position's
    output gives the next drafts (an EAGLE head's catch-up forward drafts depth 1, a draft LM's the first token).
    Split by what each position produced, evenly (as ``DrafterWork.charge`` splits a forward over its units): the
    context positions' share is useful whatever is accepted; the drafting position's is charged to ``unit``, useful
    only when a draft it produced is accepted (``commit`` settles it), so a rejected depth-1 draft books waste
    (docs/metrics.md, *Drafter-FLOP waste*)."""
    drafting = flops / max(positions, 1)
    count_useful_drafter_flops(counters, flops - drafting)
    work.charge([unit], drafting)
