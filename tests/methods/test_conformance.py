"""The conformance suite: every method of the catalog, through the same lossless checks.

A method is tested by being listed in ``methods/__init__.py``: it is built with its default options from what its
catalog entry says it needs (nothing, a draft LM, or a drafter its own trainer writes for the test's target), then

- greedy: in float32 it emits exactly the tokens `ar` emits, on prompts of a briefly trained Markov language;
- sampling: on a vocabulary of 6, the distribution of its first three tokens equals the target's (every 3-token
  continuation enumerated, a chi-square test at ALPHA; a correct method fails by chance with probability 1e-3);
- host reads: a decoding step reads at most one device value on the host, the verifier's (the emulation of
  ``harness.measure.host_sync``, so a CPU run predicts a GPU run's synchronisations).

The greedy and sampling checks also run `hedgespec` over every catalog method it takes as an expert, first and then
second beside the model-free `pld` (``hedgespec:owl,pld``, ``hedgespec:pld,owl``, ...): an expert the learner did
not pick commits the accepted text grafted onto its own tree, which its ``commit`` must take.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness import SamplingConfig, generate, wrap_model
from harness.backend.models import LoadedModel, load_model
from harness.catalog import entry, method_names
from harness.data.token_streams import save_tokens
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.measure.host_sync import audit_generation
from harness.training.drafters import DrafterTrainRequest
from methods.hedgespec import UNSUPPORTED
from tests.helpers import (
    chi_square_pvalue, exact_distribution, make_llama, markov_batches, sampled_distribution, train_briefly,
)

METHODS = method_names()
PARTNER = "pld"  # the model-free expert beside each other one (so it is tested first and second as well)
EXPERTS = [method for method in METHODS if method not in UNSUPPORTED and method != PARTNER]
CASES = [*METHODS, *(f"hedgespec:{pair}" for method in EXPERTS for pair in (f"{method},{PARTNER}",
                                                                            f"{PARTNER},{method}"))]
ALPHA = 1e-3
SAMPLES = 1500  # generations per method; at ALPHA a correct method fails by chance with probability 1e-3
PAIR_SAMPLES = 1000  # per hedgespec:A,B case: the fewest the suite's lossless checks draw (each expert alone: SAMPLES)
GREEDY = SamplingConfig()


class Zoo:
    """A target saved to disk, a draft LM, a token stream, and drafters trained on demand (one per method)."""

    def __init__(self, root: Path, target_model, draft_model, vocab: int, train_steps: int) -> None:
        self.root = root
        target_model.save_pretrained(root / "target")
        self.target = load_model(str(root / "target"), with_tokenizer=False)
        self.draft = wrap_model(draft_model)
        batches = markov_batches(vocab, 32, 48, seed=5)
        save_tokens(root / "tokens.pt", torch.cat([next(batches).flatten() for _ in range(2)]))
        self.train_steps = train_steps
        self.drafters: dict[str, Path] = {}

    def drafter(self, method: str) -> Path:
        if method not in self.drafters:
            out = self.root / f"drafter-{method}"
            request = DrafterTrainRequest(method=method, target=str(self.root / "target"), data=self.root / "tokens.pt",
                                          out=out, steps=self.train_steps, progress=False,
                                          options={"seq_len": "48", "batch_size": "8", "lr": "3e-3"})
            method_spec(method).train(request)
            self.drafters[method] = out
        return self.drafters[method]

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

    def build(self, case: str):
        """The adapter of a case: a catalog method with its default options, or ``hedgespec:A,B`` over those
        experts."""
        method, _, experts = case.partition(":")
        options = {"experts": ",".join(self.expert(name) for name in experts.split(","))} if experts else {}
        return build_adapter(method, options, self.inputs(method))[0]

    def inputs(self, method: str) -> BuildInputs:
        item = entry(method)
        return BuildInputs(self.target, self.draft if item.needs_draft else None,
                           self.drafter(method) if item.needs_drafter else None)


@pytest.fixture(scope="module")
def markov_zoo(tmp_path_factory) -> Zoo:
    """A briefly trained Markov-language target (3 layers, width 48) and a smaller trained draft LM."""
    target = train_briefly(make_llama(vocab=48, hidden=48, layers=3, heads=4, seed=2), steps=150, seed=0)
    draft = train_briefly(make_llama(vocab=48, hidden=24, layers=1, heads=2, seed=3), steps=150, seed=0)
    return Zoo(tmp_path_factory.mktemp("conformance-greedy"), target, draft, 48, train_steps=60)


@pytest.fixture(scope="module")
def small_vocab_zoo(tmp_path_factory) -> Zoo:
    """Peaked, disagreeing random models on 6 tokens, so drafts are often rejected and often accepted."""
    target = make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=0, init_range=1.0)
    draft = make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=1, init_range=1.0)
    return Zoo(tmp_path_factory.mktemp("conformance-sampling"), target, draft, 6, train_steps=0)


def _prompts(count: int = 12) -> list[torch.Tensor]:
    return [row[None] for row in next(markov_batches(48, count, 6 + count % 5, seed=7))]


@pytest.mark.parametrize("method", CASES)
def test_greedy_output_equals_ar(markov_zoo: Zoo, method: str):
    target: LoadedModel = markov_zoo.target
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    adapter = markov_zoo.build(method)
    drafted, drafter_forwards, drafter_seconds = 0, 0, 0.0
    for prompt in _prompts():
        expected = generate(target, ar, prompt, 32, GREEDY).output_ids
        result = generate(target, adapter, prompt, 32, GREEDY)
        assert result.output_ids == expected, f"{method} left ar's greedy output on prompt {prompt.tolist()}"
        drafted += result.counters.drafted_tokens
        drafter_forwards += result.counters.drafter.forwards
        drafter_seconds += result.counters.phase_seconds["drafter"]
    assert method == "ar" or drafted > 0, f"{method} drafted nothing: the test would not exercise verification"
    # a method whose drafter runs forwards has them timed as the drafter phase (none: no drafter time)
    assert (drafter_seconds > 0) == (drafter_forwards > 0), f"{method}: drafter forwards not timed as drafter"


@pytest.mark.parametrize("method", CASES)
def test_sampled_distribution_equals_the_target(small_vocab_zoo: Zoo, method: str):
    sampling = SamplingConfig(1.0)
    target = small_vocab_zoo.target
    adapter = small_vocab_zoo.build(method)
    exact = exact_distribution(target, [1, 2, 3], 3, sampling)
    samples = PAIR_SAMPLES if ":" in method else SAMPLES
    counts = sampled_distribution(target, adapter, [1, 2, 3], 3, sampling, samples, seed=0)
    assert chi_square_pvalue(counts, exact) > ALPHA


# Methods whose design reads more than the verifier's value each step, with their budget and why (a regression past
# the budget still fails). Every other method: the verifier's read alone.
HOST_READ_BUDGETS = {
    "stand": (2.1, "its n-gram store lives on the host: the verified distributions' top-k rows are read once a step "
                   "(and, sampling, a block of Gumbel noise every 4096 draws)"),
    "hedgespec": (3.1, "every expert's tree is read once a step (to graft and score it), plus its experts' own reads "
                       "(the default pld,stand: stand's)"),
    "polybasic": (8, "staged verification: each inner round's mid-model verdict is read on the host"),
}


@pytest.mark.parametrize("method", METHODS)
def test_at_most_one_host_read_per_step(markov_zoo: Zoo, method: str):
    target = markov_zoo.target
    adapter, _ = build_adapter(method, {}, markov_zoo.inputs(method))
    runtime = EngineRuntime(target, EngineOptions(kv_cache="static"))
    budget, why = HOST_READ_BUDGETS.get(method, (1, "the verifier's read alone"))
    for sampling in (GREEDY, SamplingConfig(1.0)):
        audit = audit_generation(target, adapter, _prompts()[0], 24, sampling, runtime,
                                 torch.Generator().manual_seed(0))
        assert audit.steps > 1 and audit.reads_per_step <= budget, (
            f"{method} at T={sampling.temperature:g}: {audit.reads_per_step:.2f} host reads per step, over its "
            f"budget {budget} ({why}): {audit.by_operation}")
