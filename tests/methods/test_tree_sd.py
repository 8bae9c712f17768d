"""tree_sd: greedy lossless for both policies and several shapes, sampling lossless with and without
replacement (and a wrong variant caught), the tree search against brute force, acceptance measurement."""

import json

import pytest
import torch

from harness import SamplingConfig, generate, wrap_model
from harness.measure.calibrations.acceptance import rank_acceptance
from harness.measure.calibrations.latency import target_latencies
from harness.verify.sampling import align_vocab, logits_to_probs
from harness.trees.sequoia import branching_shape, choose_budget, expected_tokens, optimal_tree
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.engine.drafting import choose_children
from harness.trees.tree import depths_of
from harness.engine.draft_lm import DraftLMAdapter
from tests.helpers import chi_square_pvalue, exact_distribution, make_llama, sampled_distribution

GREEDY = SamplingConfig()
PROMPTS = [torch.randint(0, 48, (1, 3 + i % 9), generator=torch.Generator().manual_seed(i)) for i in range(22)]


@pytest.fixture(scope="module")
def sequoia_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tree") / "sequoia.json"
    shape = optimal_tree([0.5, 0.2, 0.1], budget=10, max_depth=4)
    path.write_text(json.dumps({"parents": list(shape.parents)}))
    return str(path)


@pytest.mark.parametrize("options", [
    {"policy": "specinfer", "branching": "4,2,2,1"},
    {"policy": "specinfer", "branching": "2,2,2,2,2"},
    {"policy": "specinfer", "branching": "1,1,1"},
    {"policy": "sequoia"},
])
def test_tree_sd_greedy_equals_ar(trained_pair, sequoia_file, options):
    target, draft = trained_pair
    if options["policy"] == "sequoia":
        options = {**options, "tree_file": sequoia_file}
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    tree_sd, _ = build_adapter("tree_sd", options, BuildInputs(target, draft, None))
    accepted_deep = 0
    for prompt in PROMPTS:
        expected = generate(target, ar, prompt, 40, GREEDY).output_ids
        result = generate(target, tree_sd, prompt, 40, GREEDY)
        assert result.output_ids == expected
        accepted_deep += sum(result.counters.accepted_by_depth[1:])
    assert accepted_deep > 0, "no path deeper than one token was ever accepted"


def test_tree_sd_beats_sd_in_tau_at_equal_depth(trained_pair):
    target, draft = trained_pair
    inputs = BuildInputs(target, draft, None)
    sd, _ = build_adapter("sd", {"gamma": 4}, inputs)
    tree_sd, _ = build_adapter("tree_sd", {"branching": "4,2,2,1"}, inputs)
    taus = {}
    for name, adapter in (("sd", sd), ("tree_sd", tree_sd)):
        new = forwards = 0
        for prompt in PROMPTS:
            counters = generate(target, adapter, prompt, 40, GREEDY).counters
            new, forwards = new + counters.new_tokens, forwards + counters.target.forwards
        taus[name] = new / forwards
    assert taus["tree_sd"] > taus["sd"], taus


def wrong_without_replacement(logits, count, ctx, replacement):
    """Draws without replacement but hands the verifier the original q for every sibling (wrong)."""
    chosen = choose_children(logits, count, ctx, replacement=False)
    original = logits_to_probs(align_vocab(logits, ctx.target_vocab_size), ctx.sampling)
    return [(token, original) for token, _ in chosen]


@pytest.fixture(scope="module")
def small_vocab_pair():
    target = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=0, init_range=1.0))
    draft = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=1, init_range=1.0))
    return target, draft


# with replacement at T = 1 (SpecInfer's default) is the conformance suite's tree_sd case; without it, T = 1 over a
# top-k of 2 (3 siblings from 2 possible tokens: the third carries q = 0) and a warped T = 0.8 with top-k 4
@pytest.mark.parametrize("replacement,sampling", [
    (False, SamplingConfig(0.8, top_k=4)), (False, SamplingConfig(1.0, top_k=2))])
def test_tree_sd_sampling_is_lossless(small_vocab_pair, replacement, sampling):
    target, draft = small_vocab_pair
    drafter = DraftLMAdapter(draft, branching_shape((3, 2)), replacement)
    exact = exact_distribution(target, [1, 2, 3], 3, sampling)
    counts = sampled_distribution(target, drafter, [1, 2, 3], 3, sampling, 1000, seed=0)
    assert chi_square_pvalue(counts, exact) > 1e-3


def test_wrong_without_replacement_verifier_is_caught(small_vocab_pair):
    target, draft = small_vocab_pair
    sampling = SamplingConfig(1.0)
    drafter = DraftLMAdapter(draft, branching_shape((3, 2)), False, chooser=wrong_without_replacement)
    exact = exact_distribution(target, [1, 2, 3], 3, sampling)
    counts = sampled_distribution(target, drafter, [1, 2, 3], 3, sampling, 1500, seed=0)
    assert chi_square_pvalue(counts, exact) < 1e-3


def _all_trees(nodes: int):
    """Every rooted ordered tree with ``nodes`` draft nodes, as parents tuples (children appended in order)."""
    def grow(parents):
        if len(parents) == nodes + 1:
            yield tuple(parents)
            return
        for parent in range(len(parents)):
            yield from grow(parents + [parent])
    yield from grow([-1])


@pytest.mark.parametrize("acceptance", [[0.6, 0.2, 0.1], [0.9], [0.3, 0.3, 0.3, 0.05], [0.5, 0.4]])
@pytest.mark.parametrize("budget", [1, 2, 3, 4, 5, 6])
def test_tree_search_is_optimal_against_brute_force(acceptance, budget):
    best = max(expected_tokens(parents, acceptance) for n in range(budget + 1) for parents in _all_trees(n))
    shape = optimal_tree(acceptance, budget)
    assert shape.draft_nodes <= budget
    assert shape.expected_tokens == pytest.approx(best)
    assert expected_tokens(shape.parents, acceptance) == pytest.approx(shape.expected_tokens)


@pytest.mark.parametrize("max_depth", [1, 2, 3])
def test_tree_search_respects_depth(max_depth):
    acceptance = [0.7, 0.2]
    best = max(expected_tokens(parents, acceptance) for n in range(6) for parents in _all_trees(n)
               if max(depths_of(parents)) <= max_depth)
    shape = optimal_tree(acceptance, 5, max_depth)
    assert shape.depth <= max_depth and shape.expected_tokens == pytest.approx(best)


def test_choose_budget_trades_tokens_against_latency():
    acceptance = [0.8, 0.1]
    cheap = {size: 1.0 for size in (1, 2, 4, 8, 16)}
    shape, rates = choose_budget(acceptance, cheap, draft_step_latency=0.0)
    assert shape.draft_nodes == 15  # free verification: the biggest tree wins
    steep = {size: float(size) for size in (1, 2, 4, 8, 16)}
    shape, _ = choose_budget(acceptance, steep, draft_step_latency=0.0)
    assert shape.draft_nodes <= 1


def test_rank_acceptance_matches_greedy_agreement(trained_pair):
    target, draft = trained_pair
    windows = torch.randint(0, 48, (2, 16), generator=torch.Generator().manual_seed(0))
    acceptance = rank_acceptance(target, draft, windows, GREEDY, 3, choose_children, replacement=False)
    with torch.no_grad():
        agree = (target.model(windows).logits.argmax(-1) == draft.model(windows).logits.argmax(-1)).float().mean()
    assert acceptance[0] == pytest.approx(float(agree))
    assert sum(acceptance) <= 1.0 + 1e-9
    sampled = rank_acceptance(target, draft, windows, SamplingConfig(1.0), 3, choose_children, replacement=False)
    assert sum(sampled) <= 1.0 + 1e-9 and sampled[0] > 0


def test_forward_latency_measures_every_size(trained_pair):
    target, _ = trained_pair
    latencies = target_latencies(target.model, 32, [1, 4, 16], repeats=2)
    assert set(latencies) == {1, 4, 16} and all(value > 0 for value in latencies.values())
