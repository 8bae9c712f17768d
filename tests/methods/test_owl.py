"""`owl`: the LSTM sees only the newest accepted position's hidden state, training beats a fresh drafter, HOWL
picks the retrieved chain exactly when its match reaches the threshold, drafter FLOPs are counted, bad options
are one-line errors."""

import pytest
import torch

from harness import SamplingConfig
from harness.backend.forward import LMOutput
from harness.backend.models import load_model
from harness.engine.adapter import NoDrafts, StepContext
from harness.engine.counters import GenerationCounters
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter, parse_method_options
from harness.errors import DraftcountError
from harness.retrieval.context_index import Match
from harness.training.drafters import DrafterTrainRequest
from methods.owl.adapter import chosen_chain
from methods.owl.training import train_owl
from tests.helpers import markov_batches, save_markov_target

GREEDY = SamplingConfig()


@pytest.fixture(scope="module")
def owl_setup(tmp_path_factory):
    """A briefly trained Markov-language target and two OWL drafters: trained (short windows) and fresh."""
    root = tmp_path_factory.mktemp("owl")
    save_markov_target(root, layers=3)
    metrics = {}
    for name, steps in [("trained", 80), ("fresh", 0)]:
        request = DrafterTrainRequest(method="owl", target=str(root / "target"), data=root / "tokens.pt",
                                      out=root / name, steps=steps, progress=False, heldout=root / "tokens.pt",
                                      options={"seq_len": "32", "batch_size": "8", "lr": "3e-3", "unroll_steps": "3"})
        metrics[name] = train_owl(request)
    return load_model(str(root / "target"), with_tokenizer=False), root, metrics


def _context(vocab: int) -> StepContext:
    return StepContext(GREEDY, None, GenerationCounters(), vocab)


def _drafts(adapter, target, hidden_states: torch.Tensor, sequence: torch.Tensor) -> list[int]:
    ctx = _context(target.vocab_size)
    prefill = LMOutput(torch.zeros(1, hidden_states.shape[1], target.vocab_size), (hidden_states,))
    adapter.begin(ctx, sequence[:, :-1], prefill)
    tree = adapter.propose(ctx, sequence)
    tree.resolve()
    return tree.tokens.tolist()


def test_lstm_drafts_depend_only_on_the_newest_hidden_state(owl_setup):
    target, root, _ = owl_setup
    adapter, _ = build_adapter("owl", {}, BuildInputs(target, None, root / "trained"))
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, 20, target.config.hidden_size, generator=generator)
    sequence = torch.randint(48, (1, 21), generator=generator)
    baseline = _drafts(adapter, target, hidden, sequence)
    changed_context = hidden.clone()
    changed_context[:, :-1] = torch.randn(1, 19, target.config.hidden_size, generator=generator)
    longer = torch.cat([torch.randn(1, 50, target.config.hidden_size, generator=generator), hidden], dim=1)
    longer_sequence = torch.cat([torch.randint(48, (1, 50), generator=generator), sequence], dim=1)
    assert _drafts(adapter, target, changed_context, sequence) == baseline
    assert _drafts(adapter, target, longer, longer_sequence) == baseline  # context length plays no part
    changed_last = hidden.clone()
    changed_last[:, -1] = torch.randn(target.config.hidden_size, generator=generator) * 5
    assert _drafts(adapter, target, changed_last, sequence) != baseline  # the test can fail


def test_training_beats_a_fresh_drafter_and_keeps_ar_output(owl_setup):
    target, root, metrics = owl_setup
    trained, fresh = (metrics[name]["heldout_top1_agreement_by_step"] for name in ("trained", "fresh"))
    assert len(trained) == 3 and trained[0] > fresh[0] + 0.2, (trained, fresh)
    ar = NoDrafts()
    inputs = BuildInputs(target, None, root / "trained")
    adapter, _ = build_adapter("owl", {"top_k": 3, "depth": 4, "budget": 10}, inputs)
    accepted = 0
    for prompt in [row[None] for row in next(markov_batches(48, 6, 10, seed=7))]:
        result = generate(target, adapter, prompt, 24, GREEDY)
        assert result.output_ids == generate(target, ar, prompt, 24, GREEDY).output_ids
        accepted += result.counters.accepted_tokens
        counters = result.counters
        assert counters.drafter.forwards > 0 and counters.drafter.flops > 0
        assert 0 < counters.extra.get("drafter_useful_flops", 0) <= counters.drafter.flops
    assert accepted > 6 * 24 * 0.3  # the trained LSTM drafts tokens the target accepts
    assert adapter.details["drafter_parameters"] > 0 and adapter.details["hybrid"] == "off"


def test_howl_choice_follows_the_threshold():
    match = Match([5, 6, 7], ngram=3)
    assert chosen_chain(match, 3) == [5, 6, 7]
    assert chosen_chain(match, 4) is None
    assert chosen_chain(None, 1) is None


def test_howl_drafts_the_retrieved_chain_past_the_threshold_and_the_tree_otherwise(owl_setup):
    target, root, _ = owl_setup
    adapter, _ = build_adapter("owl", {"hybrid": "suffix", "threshold": 3, "max_draft": 5, "top_k": 2, "depth": 3,
                                       "budget": 6}, BuildInputs(target, None, root / "trained"))
    hidden = torch.randn(1, 12, target.config.hidden_size)
    repeated = torch.tensor([[1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 1, 2, 3]])  # suffix 1 2 3 recurs (3 tokens)
    ctx = _context(target.vocab_size)
    ctx.tokens[:] = repeated[0].tolist()  # the engine's host copy of the sequence
    adapter.begin(ctx, repeated[:, :-1], LMOutput(torch.zeros(1, 12, 48), (hidden,)))
    tree = adapter.propose(ctx, repeated)
    assert tree.tokens.tolist() == [3, 4, 9, 9, 9, 9] and list(tree.parents) == [-1, 0, 1, 2, 3, 4]
    assert ctx.counters.extra == {"howl_chain_steps": 1} and ctx.counters.drafter.forwards == 0
    fresh = torch.tensor([[1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 5, 2, 3]])  # only "2 3" recurs: below the threshold
    ctx = _context(target.vocab_size)
    ctx.tokens[:] = fresh[0].tolist()
    adapter.begin(ctx, fresh[:, :-1], LMOutput(torch.zeros(1, 12, 48), (hidden,)))
    tree = adapter.propose(ctx, fresh)
    tree.resolve()
    assert tree.size == 7 and ctx.counters.extra == {"howl_tree_steps": 1} and ctx.counters.drafter.forwards > 0
    assert ctx.counters.trace["howl_chain"] == [0.0]


def test_howl_keeps_ar_output_and_counts_both_choices(owl_setup):
    target, root, _ = owl_setup
    adapter, _ = build_adapter("owl", {"hybrid": "suffix", "threshold": 2}, BuildInputs(target, None, root / "trained"))
    ar = NoDrafts()
    totals = {"howl_chain_steps": 0, "howl_tree_steps": 0}
    for prompt in [row[None] for row in next(markov_batches(48, 6, 16, seed=9))]:
        result = generate(target, adapter, prompt, 32, GREEDY)
        assert result.output_ids == generate(target, ar, prompt, 32, GREEDY).output_ids
        steps = len(result.counters.step_accepted)
        extra = result.counters.extra
        assert extra.get("howl_chain_steps", 0) + extra.get("howl_tree_steps", 0) == steps
        assert len(result.counters.trace["howl_chain"]) == steps
        for key in totals:
            totals[key] += result.counters.extra.get(key, 0)
    assert totals["howl_chain_steps"] > 0 and totals["howl_tree_steps"] > 0


@pytest.mark.parametrize("options, message", [
    ({"hybrid": "tree"}, "must be one of"), ({"threshold": "0"}, "min_n <= threshold"),
    ({"top_k": "0"}, "beam tree needs"), ({"max_draft": "0"}, "max_draft"), ({"bogus": "1"}, "bogus"),
])
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(DraftcountError, match=message):
        parse_method_options("owl", options)


def test_a_drafter_of_another_method_is_refused(owl_setup, tmp_path):
    target, root, _ = owl_setup
    with pytest.raises(DraftcountError, match="holds no owl drafter"):
        build_adapter("owl", {}, BuildInputs(target, None, tmp_path))
