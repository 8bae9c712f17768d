"""How the engine runs the models: the overhead switches, one runtime object per run.

``EngineOptions`` (typed, unknown keys are errors; ``--engine KEY=VALUE`` on
the command line, ``bench.engine`` in the workflow config):

kv_cache: ``auto`` (the default: ``static`` on a CUDA device, ``dynamic`` elsewhere), ``dynamic``
    (transformers' DynamicCache: every forward concatenates,
    a rejected path is cropped) or ``static`` (``harness.backend.static_cache``:
    buffers preallocated once per run for the target and for every drafter's
    own cache, accepted paths gathered in place).
cuda_graphs: ``auto`` (the default: ``on`` on a CUDA device, ``off`` elsewhere: the fast path is what a GPU
    run measures unless ``--engine kv_cache=dynamic --engine cuda_graphs=off`` asks for eager),
    ``verify`` replays the target's verify forward from a CUDA graph
    per tree size; ``on`` also the drafters' fixed-shape steps
    (``harness.backend.cuda_graphs``). Both need ``kv_cache=static`` and a CUDA device.
    Prefill stays eager.
compile: ``on`` wraps the target in ``torch.compile`` (``compile_mode``,
    ``compile_backend``; dynamic shapes). With CUDA graphs the compiled module
    is what gets captured, so use a mode without its own CUDA graphs
    (``default``, ``max-autotune-no-cudagraphs``).

An ``EngineRuntime`` holds what lives across generations: the static caches
(regrown, and their graphs dropped, only when a generation needs more room)
and the captured graphs. Adapters get theirs through ``StepContext.runtime``
(``drafter_cache``, ``drafter_graphs``), keyed by the adapter object.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

import torch
from transformers import PretrainedConfig
from transformers.cache_utils import Cache

from harness.errors import DraftcountError
from harness.backend.cuda_graphs import GraphedForwards, check_capturable
from harness.backend.forward import ForwardTally, LMOutput, run_model
from harness.backend.kv_cache import eager_refusal, new_cache, rollback_refusal
from harness.backend.models import LoadedModel
from harness.backend.static_cache import new_static_cache, reset_static_cache, static_capacity
from harness.trees.tree import TokenTree
from harness.engine.graph_draws import GraphGenerator, verify_draws
from harness.verify.sampling import SamplingConfig

Result = TypeVar("Result")
CAPACITY_STEP = 256  # static caches are sized in multiples of this many positions
SETTLING_WARMUPS = 4  # the most extra warm-up generations run while warm-ups still capture CUDA graphs
RECOMPILE_LIMIT = 64  # compiled versions of the target's forward dynamo may keep (compile=on)
TIMING_RERUNS = 2  # the most times a timed generation that captured a CUDA graph is run again


@dataclass(frozen=True)
class EngineOptions:
    kv_cache: Literal["auto", "dynamic", "static"] = "auto"
    cuda_graphs: Literal["auto", "off", "verify", "on"] = "auto"
    compile: Literal["off", "on"] = "off"
    compile_mode: Literal["default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune"] = "default"
    compile_backend: Literal["inductor", "aot_eager", "eager"] = "inductor"  # the latter two: for debugging

    def __post_init__(self) -> None:
        if self.cuda_graphs not in ("off", "auto") and self.kv_cache == "dynamic":
            raise ValueError(f"cuda_graphs={self.cuda_graphs} needs kv_cache=static "
                             "(captured forwards need fixed cache addresses)")
        if self.cuda_graphs != "off" and self.compile == "on" and self.compile_mode in ("reduce-overhead",
                                                                                        "max-autotune"):
            raise ValueError(f"compile_mode={self.compile_mode} captures CUDA graphs itself; with cuda_graphs "
                             "use default or max-autotune-no-cudagraphs")


    def resolved(self, device: torch.device | str, full_attention: bool = True) -> EngineOptions:
        """These options with ``auto`` settled for ``device``: static cache + CUDA graphs on CUDA, eager elsewhere
        (``cuda_graphs=auto`` with an explicit ``kv_cache=dynamic`` stays eager; so does a target whose cache is
        not full attention alone, ``full_attention=False``: a hybrid model)."""
        cuda = torch.device(device).type == "cuda" and full_attention
        kv_cache = self.kv_cache if self.kv_cache != "auto" else ("static" if cuda else "dynamic")
        graphs = self.cuda_graphs
        if graphs == "auto":
            graphs = "on" if cuda and kv_cache == "static" else "off"
        return dataclasses.replace(self, kv_cache=kv_cache, cuda_graphs=graphs)


EAGER = EngineOptions(kv_cache="dynamic", cuda_graphs="off")  # the plain way, on any device


def allow_recompiles(limit: int = RECOMPILE_LIMIT) -> None:
    """Let dynamo keep up to ``limit`` compiled versions of a function (process-wide). One target forward meets
    several guard sets: prefill and verify, a mask or none, hidden states or not, the dynamic or the static
    cache; past dynamo's default of 8 it silently runs the rest eagerly, and `compile` would time eager code."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, limit)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * limit)


def static_capacity_for(needed: int) -> int:
    """Positions a static cache allocates for a generation that needs ``needed``."""
    return -(-needed // CAPACITY_STEP) * CAPACITY_STEP


def reusable_cache(previous: Cache | None, config: PretrainedConfig, needed: int, kind: str,
                   dtype: torch.dtype | None = None, device: torch.device | None = None) -> Cache:
    """An empty cache with room for ``needed`` positions: a new DynamicCache, or ``previous`` static cache
    rewound when it is big enough (else a new one)."""
    if kind == "dynamic":
        return new_cache(config)
    if previous is None or static_capacity(previous) is None or static_capacity(previous) < needed:
        previous = new_static_cache(config, static_capacity_for(needed), dtype, device)
    reset_static_cache(previous)
    return previous


class EngineRuntime:
    """The target and the drafters' caches and graphs as the engine runs them under ``options``."""

    def __init__(self, target: LoadedModel, options: EngineOptions = EngineOptions(), capture: bool = True) -> None:
        self.rollback_refusal = rollback_refusal(target.config)  # why drafts cannot be dropped (hybrid), or None
        eager_only = eager_refusal(target.config)  # that, or a hybrid run over trees by harness.hybrid
        options = options.resolved(target.device, full_attention=eager_only is None)
        self.options = options
        self.capture = capture
        if options.compile == "on":
            allow_recompiles()
            mode = options.compile_mode if options.compile_backend == "inductor" else None  # modes are inductor's
            compiled = torch.compile(target.model, backend=options.compile_backend, mode=mode, dynamic=True)
            target = dataclasses.replace(target, model=compiled)
        self.target = target
        if eager_only and (options.kv_cache == "static" or options.cuda_graphs != "off"):
            raise DraftcountError(f"kv_cache=static and CUDA graphs hold full-attention layers only, and this "
                                  f"target's {eager_only}: run it with kv_cache=dynamic cuda_graphs=off")
        self.graphs = (self._graph_runner(target.config, "the target", target.device, target.dtype)
                       if options.cuda_graphs != "off" else None)
        self.static_cache: Cache | None = None
        self.reserved = 0  # every cache is sized for sequences of at least this many positions (``reserve``)
        self._drafter_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._drafter_graphs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._checked_drafters: weakref.WeakSet = weakref.WeakSet()  # drafters whose cache can drop drafts
        self.graph_generator = GraphGenerator(target.device)  # what captured verify graphs draw from (CUDA)

    def graph_runners(self) -> dict[str, GraphedForwards]:
        """Every live graph runner: "target" and one per drafter (its adapter's class name, numbered)."""
        runners = {"target": self.graphs} if self.graphs is not None else {}
        for index, (owner, graphs) in enumerate(self._drafter_graphs.items()):
            runners[f"{type(owner).__name__}-{index}"] = graphs
        return runners

    def graphs_of(self, owner: object) -> GraphedForwards | None:
        """The graph runner of ``owner``'s drafter, if it has one."""
        return self._drafter_graphs.get(owner)

    @property
    def captures(self) -> int:
        """CUDA graphs captured so far, target and drafters."""
        return sum(graphs.captures for graphs in self.graph_runners().values())

    def reserve(self, sequence: int) -> None:
        """Size the caches made from now on for sequences up to ``sequence`` positions. Called with the run's
        longest before its warm-up, no timed generation regrows a static cache (which drops its CUDA graphs and
        captures them again inside the timed window)."""
        self.reserved = max(self.reserved, sequence)

    def _room(self, sequence: int, lookahead: int) -> int:
        """Positions a cache needs: the longer of ``sequence`` and the reserved length, plus ``lookahead``."""
        return max(sequence, self.reserved) + lookahead

    def cache_for(self, sequence: int, lookahead: int) -> Cache:
        """The target's empty cache with room for a ``sequence``-position generation plus ``lookahead`` draft
        tokens."""
        self.static_cache = reusable_cache(self.static_cache, self.target.config, self._room(sequence, lookahead),
                                           self.options.kv_cache, self.target.dtype, self.target.device)
        return self.static_cache

    def drafter_cache(self, owner: object, config: PretrainedConfig, sequence: int, lookahead: int,
                      dtype: torch.dtype, device: torch.device) -> Cache:
        """An empty KV cache for ``owner``'s drafter (a DynamicCache, or its static cache rewound) with room for
        a ``sequence``-position generation plus ``lookahead``. A drafter whose cache cannot drop rejected drafts
        (a hybrid model) is refused with one line."""
        if owner not in self._checked_drafters:  # once per drafter, not per generation
            why = rollback_refusal(config)
            if why:
                raise DraftcountError(f"{type(owner).__name__}'s drafter cannot drop rejected drafts from its KV "
                                      f"cache: its {why}")
            self._checked_drafters.add(owner)
        cache = reusable_cache(self._drafter_caches.get(owner), config, self._room(sequence, lookahead),
                               self.options.kv_cache, dtype, device)
        if self.options.kv_cache == "static":
            self._drafter_caches[owner] = cache
        return cache

    def drafter_graphs(self, owner: object, config: PretrainedConfig, device: torch.device,
                       dtype: torch.dtype) -> GraphedForwards | None:
        """``owner``'s graph runner when the drafters' steps are graphed (``cuda_graphs=on``), else None."""
        if self.options.cuda_graphs != "on":
            return None
        if owner not in self._drafter_graphs:
            self._drafter_graphs[owner] = self._graph_runner(config, f"{type(owner).__name__}'s drafter", device,
                                                             dtype)
        return self._drafter_graphs[owner]

    def _graph_runner(self, config: PretrainedConfig, what: str, device: torch.device,
                      dtype: torch.dtype) -> GraphedForwards:
        """A graph runner for ``what`` (a model of ``config``), once its RoPE is known to be capturable."""
        check_capturable(config, what)
        return GraphedForwards(device, dtype, self.capture)

    def draw_generator(self, run: torch.Generator | None) -> torch.Generator | None:
        """The generator a graphed forward or block draws from: ``run`` itself where graphs are emulated (the CPU);
        on a GPU the runtime's ``GraphGenerator`` (a captured graph replays the draws of the generator it was
        captured with), reseeded from ``run``'s seed."""
        return self.graph_generator.for_run(run) if self.capture else run

    def verify(self, tree: TokenTree, cache: Cache, prefix_len: int, tally: ForwardTally, hidden: bool,
               hidden_layers: tuple[int, ...] | None = None, sampling: SamplingConfig | None = None,
               generator: torch.Generator | None = None) -> LMOutput:
        """The target's forward over the whole ``tree`` rooted after ``prefix_len`` cached positions (with
        ``hidden``: the hidden states at ``hidden_layers``, as in ``run_model``). With ``sampling`` (T > 0, the
        default verifier), a graphed forward over a tree of deterministic drafts, a chain of sampled ones or a tree
        whose drafts all carry q also makes the verification's draws inside its graph (``LMOutput.draws``,
        ``harness.engine.graph_draws``)."""
        bias = tree.graph_bias(self.target.dtype)
        draws = None
        if sampling is not None and not sampling.is_greedy and self.graphs is not None:
            draws = verify_draws(tree, bias, sampling, self.draw_generator(generator), self.target.device)
        return run_model(self.target, tree.tokens.unsqueeze(0), cache, None, tally, attention_bias=bias,
                         output_hidden_states=hidden, graphs=self.graphs, hidden_layers=hidden_layers,
                         position_offsets=tree.position_offsets(), draws=draws)


def warm_up(generate_once: Callable[[int], object], captures: Callable[[], int], warmups: int,
            settling: int = SETTLING_WARMUPS) -> int:
    """Run ``warmups`` untimed generations (``generate_once(i)``, i = 0, 1, ...), then up to ``settling`` more
    for as long as the last one captured a CUDA graph (``captures()`` counts them): a generation captures each
    catch-up or tree shape it meets for the first time, so warming until one meets none keeps captures out of
    the timed generations. Returns how many ran (none when ``warmups`` is 0)."""
    if warmups < 1:
        return 0
    ran = 0
    while ran < warmups + settling:
        before = captures()
        generate_once(ran)
        ran += 1
        if ran >= warmups and captures() == before:
            break
    return ran


def without_captures(generate_once: Callable[[], Result], captures: Callable[[], int],
                     reruns: int = TIMING_RERUNS) -> tuple[Result, int, int]:
    """Run ``generate_once()``, a timed generation; while a run captured a CUDA graph (``captures()`` counts
    them), run it again, at most ``reruns`` more times. A capture inside the timed window costs two eager
    forwards, a device synchronisation and the graph's instantiation; the rerun (same prompt and seed, so the
    same shapes) replays instead. Warm-ups cannot meet every shape a long generation meets (a drafter's
    catch-up over 1..depth+1 accepted tokens, say), so this is what keeps captures out of the timings.
    Returns the last run's result, the graphs captured during it (0 unless the reruns ran out) and how many
    runs were discarded."""
    before = captures()
    result = generate_once()
    discarded = 0
    while captures() > before and discarded < reruns:
        discarded += 1
        before = captures()
        result = generate_once()
    return result, captures() - before, discarded
