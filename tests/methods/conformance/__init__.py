"""The conformance suite: every method of the catalog, through the same lossless checks (this package's tests;
here what they share: the zoo and the cases).

A method is tested by being in the catalog (listed in ``methods/__init__.py``, or registered by an installed
plug-in package under the entry-point group ``draftcount.methods``): it is built with its default options from what
its catalog entry says it needs (nothing, a draft LM, or a drafter its own trainer writes for the test's target), then

- greedy: in float32 it emits exactly the tokens `ar` emits, on prompts of a briefly trained Markov language;
- sampling: on a vocabulary of 6, the distribution of its first three tokens equals the target's (every 3-token
  continuation enumerated, a chi-square test at ALPHA; a correct method fails by chance with probability 1e-3);
- host reads: a decoding step reads at most one device value on the host, the verifier's (the emulation of
  ``harness.measure.diagnostics.host_sync``, so a CPU run predicts a GPU run's synchronisations);
- launches: a decoding step dispatches at most its budget of ATen ops outside graphed forwards
  (``DISPATCH_BUDGETS``, ``harness.measure.diagnostics.dispatch``; each about one kernel launch in eager CUDA);
- batches: a method whose catalog entry says ``batched`` decodes a batch of prompts of different lengths whose every
  row emits `ar`'s tokens with the acceptance of a batch-1 generation at every step, and a row of a B = 4 batch
  passes the sampling check; any other method is refused with one line;
- the drafter kit's rules: a method whose drafter runs forwards and whose drafts are accepted books the useful part
  of that work (``DrafterWork``, ``harness.engine.counters``), never more than the drafter did; every drafter FLOP is
  booked once, the FLOPs booked being those torch counts its drafter running (``flops.py``); a trained drafter's
  metrics hold its held-out agreement per draft step as ``harness.training.drafters`` states it, which the gate reads.

A sampling check that fails gives its chi-square statistic, its p-value and the continuations furthest from the
target's law (``assert_follows_the_target``).

``DRAFTCOUNT_CONFORMANCE_METHODS`` narrows the suite to some methods: comma-separated names, or ``plugins`` for every
installed plug-in's (``DRAFTCOUNT_CONFORMANCE_METHODS=plugins pytest tests/methods/conformance -x -q``); the checks
not about one method (``conftest.py``) are then left out.

The greedy check also runs each drafter family whose logits go through a target-sized LM head with a draft
vocabulary (``harness.training.draft_vocab``: the zoo's most frequent half of its tokens), as the case
``<family>+vocab`` (``VOCAB_CASES``: its drafter trained a third of the zoo's steps with the training options named
there beside ``draft_vocab``, built with the method options named there; on the first half of the prompts, checking
too that it drafts only tokens of its map and that some are accepted). A catalog method with a drafter trainer is
there or in ``NO_DRAFT_VOCAB`` with the reason it takes none; a method whose catalog entry declares ``draft_vocab``
(a plug-in's: ``DECLARED_VOCAB``) gets the case ``<name>+vocab`` with its default options. The sampling check
(``PAIR_SAMPLES`` generations) and the host-read audit run the cases whose drafts carry the distribution they were
drawn from, which a draft vocabulary changes (zero outside it, paid back by the residual): P-EAGLE's chain, DFlash's
and DSpark's blocks, and `eagle` for the beam trees, whose children are verified as q = 1 whatever vocabulary ranked
them (``SAMPLED_VOCAB``: what the suite's time allows; not a declared case). Batches run the same tree code per row
as one request does.

The greedy and sampling checks also run `hedgespec` over every catalog method it takes as an expert beside the
model-free `pld` (greedy: first and second, ``hedgespec:owl,pld`` and ``hedgespec:pld,owl``; sampling: first, the
learner's random picks putting each expert in both roles; not for an expert whose adapter keeps another's
``commit``, ``SHARED_COMMIT``): an expert the learner did not pick commits the accepted text grafted onto its own
tree, which its ``commit`` must take.

test_greedy: greedy and host reads (the Markov zoo, whose drafters are trained once); test_sampling and
test_sampling_pairs: the sampling check of the methods and of the hedgespec pairs (the 6-token zoo, untrained
drafters), in files of their own so that ``pytest -n N`` runs them side by side.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import torch

from harness import SamplingConfig, wrap_model
from harness.backend.models import load_model
from harness.catalog import catalog, entry
from harness.data.token_streams import save_tokens
from harness.engine.batched import generate_batch
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.training.drafters import DrafterTrainRequest, read_drafter
from harness.verify.sampling import make_generator
from methods.hedgespec import UNSUPPORTED
from tests.helpers import (
    chi_square_test, exact_distribution, make_llama, markov_batches, markov_llama, sampled_distribution,
)

SELECTION = "DRAFTCOUNT_CONFORMANCE_METHODS"  # names (comma-separated) or `plugins`: the methods the suite checks


def selected_methods(selection: str) -> list[str]:
    """The catalog's methods the suite checks: every one (``selection`` empty), the installed plug-ins' (``plugins``)
    or the named ones; an unknown name or no plug-in is an error, not an empty suite."""
    if not selection:
        return list(catalog())
    if selection == "plugins":
        found = [name for name, item in catalog().items() if item.plugin]
        if not found:
            raise ValueError(f"{SELECTION}=plugins, but no installed package registers a method (entry points "
                             f"draftcount.methods)")
        return found
    return [entry(name.strip()).name for name in selection.split(",") if name.strip()]


METHODS = selected_methods(os.environ.get(SELECTION, ""))
# case -> (its drafter family, training options beside draft_vocab, method options); see the package docstring
ALL_VOCAB_CASES = {"eagle+vocab": ("eagle", {}, {}), "eagle3+vocab": ("eagle", {"fusion": "eagle3"}, {}),
                   "p_eagle+vocab": ("eagle", {"parallel": "3"}, {"parallel": 3}), "lyanna+vocab": ("lyanna", {}, {}),
                   "prism+vocab": ("prism", {}, {}), "owl+vocab": ("owl", {}, {}),
                   "medusa+vocab": ("medusa", {"own_lm_heads": "false"}, {}), "mtp+vocab": ("mtp", {}, {}),
                   "dream+vocab": ("dream", {}, {}), "dflash+vocab": ("dflash", {}, {}),
                   "dspark+vocab": ("dspark", {}, {})}
# a method whose catalog entry declares ``draft_vocab`` (a plug-in's) and has no case above: ``<name>+vocab``, its
# default training and method options beside draft_vocab
FAMILIES = {family for family, _, _ in ALL_VOCAB_CASES.values()}
DECLARED_VOCAB = {f"{name}+vocab": (name, {}, {}) for name in METHODS
                  if entry(name).draft_vocab and name not in FAMILIES}
VOCAB_CASES = {case: spec for case, spec in {**ALL_VOCAB_CASES, **DECLARED_VOCAB}.items()
               if spec[0] in METHODS}  # the selected families'
SAMPLED_VOCAB = [case for case in ("eagle+vocab", "p_eagle+vocab", "dflash+vocab", "dspark+vocab")
                 if case in VOCAB_CASES]
NO_DRAFT_VOCAB = {"pard": "a draft LM: its LM head is its own, over the target's vocabulary and a mask token",
                  "polybasic": "its mid model is a draft LM with its own LM head over the target's vocabulary"}
PARTNER = "pld"  # the model-free expert beside each other one (so it is tested first and second as well)
EXPERTS = [method for method in METHODS if method not in UNSUPPORTED and method != PARTNER]
PAIRS = [f"hedgespec:{pair}" for method in EXPERTS for pair in (f"{method},{PARTNER}", f"{PARTNER},{method}")]
CASES = [*METHODS, *PAIRS, *VOCAB_CASES]
# Sampling takes each expert in one position: the learner picks at random by its weights (equal at first, its
# generator running on across a test's generations), so each expert is verified and grafted in about half the steps
# either way; greedy runs both positions (the order decides the picks' tie-breaks there).
# An expert whose adapter keeps another expert's ``commit`` (a subclass of its adapter that does not override it,
# checked in test_sampling_pairs) commits grafted text through that code: its pair adds no sampling check of its own.
SHARED_COMMIT = {"prism": "eagle", "dream": "eagle"}
SHARED = sorted(method for method, other in SHARED_COMMIT.items() if method in EXPERTS and other in EXPERTS)
SAMPLING_PAIRS = [f"hedgespec:{method},{PARTNER}" for method in EXPERTS if method not in SHARED]
TRAINED = [method for method in METHODS if entry(method).needs_drafter]  # their drafters' metrics are checked
BATCHED = [method for method in METHODS if entry(method).batched]  # decode batches of B > 1 (harness.engine.batched)
ALPHA = 1e-3
SAMPLES = 1000  # generations per method; at ALPHA a correct method fails by chance with probability 1e-3 (a wrong
# verifier is caught at 1000: tests/verify/test_traversal.py)
PAIR_SAMPLES = 700  # per hedgespec:A,B or <family>+vocab case: the fewest the suite's lossless checks draw (each
# method alone: SAMPLES)
GREEDY = SamplingConfig()


class Zoo:
    """A target saved to disk, a draft LM, a token stream, and drafters trained on demand (one per method)."""

    def __init__(self, root: Path, target_model, draft_model, vocab: int, train_steps: int) -> None:
        self.root = root
        self.vocab = vocab
        target_model.save_pretrained(root / "target")
        self.target = load_model(str(root / "target"), with_tokenizer=False)
        self.draft = wrap_model(draft_model)
        batches = markov_batches(vocab, 32, 48, seed=5)
        save_tokens(root / "tokens.pt", torch.cat([next(batches).flatten() for _ in range(2)]))
        save_tokens(root / "heldout.pt", next(batches).flatten())  # the same language, other sequences
        self.train_steps = train_steps
        self.drafters: dict[str, Path] = {}
        self.metrics: dict[str, dict] = {}  # each trained drafter's metrics (its held-out agreement included)

    def drafter(self, case: str) -> Path:
        """The drafter of a method (trained ``train_steps``) or of a draft-vocabulary case (a third of them)."""
        if case not in self.drafters:
            method, extra, _ = VOCAB_CASES.get(case, (case, {}, {}))
            options = {"seq_len": "48", "batch_size": "8", "lr": "3e-3", **extra}
            if case in VOCAB_CASES:
                options["draft_vocab"] = str(self.vocab // 2)
            out = self.root / f"drafter-{case}"
            request = DrafterTrainRequest(method=method, target=str(self.root / "target"), data=self.root / "tokens.pt",
                                          out=out, steps=self.train_steps // (3 if case in VOCAB_CASES else 1),
                                          progress=False, heldout=self.root / "heldout.pt", options=options)
            self.metrics[case] = method_spec(method).train(request)
            self.drafters[case] = out
        return self.drafters[case]

    def expert(self, method: str) -> str:
        """``method`` as a hedgespec expert spec, given the drafter or draft LM directory it needs."""
        item, spec = entry(method), method
        if item.needs_drafter:
            spec += f":drafter={self.drafter(method)}"
        if item.needs_draft:
            if not (self.root / "draft").is_dir():
                self.draft.model.save_pretrained(self.root / "draft")
            spec += f":draft={self.root / 'draft'}"
        return spec

    def build(self, case: str, options: dict[str, str] | None = None):
        """The adapter of a case: a catalog method with its default options (or ``options``), ``hedgespec:A,B``
        over those experts, or a draft-vocabulary case (its family's default options)."""
        name, _, experts = case.partition(":")
        if options is None:
            options = {"experts": ",".join(self.expert(name) for name in experts.split(","))} if experts else {}
            options = VOCAB_CASES[name][2] if name in VOCAB_CASES else options
        return build_adapter(method_of(name), options, self.inputs(name))[0]

    def inputs(self, case: str) -> BuildInputs:
        item = entry(method_of(case))
        return BuildInputs(self.target, self.draft if item.needs_draft else None,
                           self.drafter(case) if item.needs_drafter else None)

    def draft_ids(self, case: str) -> set[int]:
        """The target tokens a draft-vocabulary case's drafter may draft (its d2t/t2d map)."""
        maps = read_drafter(self.drafter(case), VOCAB_CASES[case][0], meta_required=False, with_config=False).maps
        assert "d2t" in maps, (f"{case}: its drafter, trained with draft_vocab={self.vocab // 2}, holds no "
                               f"draft-vocabulary map (d2t/t2d: write_drafter(..., vocab=...), "
                               f"harness.training.draft_vocab)")
        return set((torch.arange(maps["d2t"].shape[0]) + maps["d2t"]).tolist())


def method_of(case: str) -> str:
    """The catalog method a case runs (a draft-vocabulary case: its family's; a hedgespec pair: hedgespec)."""
    return VOCAB_CASES[case][0] if case in VOCAB_CASES else case.partition(":")[0]


def build_markov_zoo(root: Path) -> Zoo:
    """A briefly trained Markov-language target (3 layers, width 48) and a smaller trained draft LM."""
    target = markov_llama()
    draft = markov_llama(hidden=24, layers=1, heads=2, seed=3)
    return Zoo(root, target, draft, 48, train_steps=60)


def build_small_vocab_zoo(root: Path) -> Zoo:
    """Peaked, disagreeing random models on 6 tokens, so drafts are often rejected and often accepted."""
    target = make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=0, init_range=1.0)
    draft = make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=1, init_range=1.0)
    return Zoo(root, target, draft, 6, train_steps=0)


def prompts(count: int = 12) -> list[torch.Tensor]:
    return [row[None] for row in next(markov_batches(48, count, 6 + count % 5, seed=7))]


def check_batch_row_distribution(zoo: Zoo, method: str) -> None:
    """A row of a B = 4 batch at T = 1 follows the target's law: rows 0, 2 and 3 answer [1, 2, 3], left-padded
    beside row 1's longer prompt (other positions); SAMPLES / 3 batches, each row its own generator."""
    sampling = SamplingConfig(1.0)
    adapter = zoo.build(method)
    answered = torch.tensor([[1, 2, 3]])
    batch = [answered, torch.tensor([[4, 1, 2, 3, 5]]), answered, answered]
    counts: Counter = Counter()
    for index in range(SAMPLES // 3):
        generators = [make_generator(4 * index + row, "cpu") for row in range(4)]
        results = generate_batch(zoo.target, adapter, batch, 3, sampling, generators)
        counts.update(tuple(results[row].output_ids) for row in (0, 2, 3))
    assert_follows_the_target(f"{method} (a row of a batch)", counts, exact_distribution(zoo.target, [1, 2, 3], 3,
                                                                                         sampling))


def check_sampled_distribution(zoo: Zoo, case: str, options: dict[str, str] | None = None) -> None:
    """The case's first three tokens at T = 1 follow the target's law (chi-square at ALPHA); ``options``: the
    method's options instead of the case's own."""
    sampling = SamplingConfig(1.0)
    adapter = zoo.build(case, options)
    exact = exact_distribution(zoo.target, [1, 2, 3], 3, sampling)
    samples = PAIR_SAMPLES if ":" in case or case in VOCAB_CASES else SAMPLES
    counts = sampled_distribution(zoo.target, adapter, [1, 2, 3], 3, sampling, samples, seed=0)
    assert_follows_the_target(case, counts, exact)


def assert_follows_the_target(case: str, counts: Counter, exact: dict) -> None:
    """The sampled continuations ``counts`` follow the target's law ``exact`` (chi-square at ALPHA); a failure says
    the statistic, its p-value and the continuations furthest from what the target expects."""
    test = chi_square_test(counts, exact)
    assert test.pvalue > ALPHA, (f"{case} does not sample the target's distribution at T = 1: {test.describe()} "
                                 f"(over {sum(counts.values())} generations; a correct method fails with probability "
                                 f"{ALPHA:g})")


# Methods whose design reads more than the verifier's value each step, with their budget and why (a regression past
# the budget still fails). Every other method: the verifier's read alone. Read by the CPU host-read audit
# (test_greedy.py) and by the CUDA suite's count of PyTorch-reported synchronisations (tests/backend/test_cuda.py).
HOST_READ_BUDGETS = {
    "stand": (2.1, "its n-gram store lives on the host: the verified distributions' top-k rows are read once a step "
                   "(and, sampling, a block of Gumbel noise every 4096 draws)"),
    "hedgespec": (3.1, "every expert's tree is read once a step (to graft and score it), plus its experts' own reads "
                       "(the default pld,stand: stand's)"),
    "polybasic": (8, "staged verification: each inner round's mid-model verdict is read on the host"),
    "dspark": (2.1, "the planner reads the block's predicted survival on the host to choose the verify length"),
}


# ATen ops a decoding step dispatches outside graphed forwards (``harness.measure.diagnostics.dispatch``; in eager CUDA
# each is about one kernel launch), per method at T = 0 and T = 1, on the Markov zoo under kv_cache=static
# cuda_graphs=on (graphs emulated on the CPU): what a step launches beside its graph replays. Each budget is the count
# measured at this commit plus 15% (and one), so a change that adds launches fails test_greedy's dispatch check; a
# change that cuts them should lower its budget (`ar`'s budgets are issue 81's goal, 4). docs/engine.md holds the table
# on random models, before and after the cuts.
DEFAULT_DISPATCH_BUDGET = (250, 300)  # a method without a line here (a new or out-of-tree one): an EAGLE-sized step
DISPATCH_BUDGETS = {
    "ar": (4, 4),
    "sd": (11, 22),
    "tree_sd": (29, 33),
    "eagle": (26, 27),
    "lyanna": (53, 30),
    "dflash": (20, 42),
    "dspark": (29, 76),
    "pard": (11, 26),
    "pld": (7, 8),
    "suffix": (9, 8),
    "stand": (24, 77),
    "reader": (7, 8),
    "hedgespec": (30, 65),
    "owl": (16, 14),
    "prism": (38, 29),
    "medusa": (12, 14),
    "mtp": (39, 24),
    "polybasic": (61, 59),
    "dream": (71, 37),
}
