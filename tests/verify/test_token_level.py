"""The sampling verifier's batched acceptance tests: the closed form for deterministic drafts equals the residual
applied sibling by sibling, repeated tokens included; a draft whose q ran out (all zero) is never accepted and
leaves the target's distribution as it was; the chooser reads nothing on the host."""

import torch

from harness.engine.adapter import StepContext
from harness.engine.counters import GenerationCounters
from harness.engine.drafting import choose_children
from harness.verify.sampling import SamplingConfig, logits_to_probs, residual_distribution
from harness.trees.tree import DeferredTree, TokenTree
from harness.verify.token_level import (chain_draws, draw_tests, one_hot_tests, residual_tests, sampled_chain,
                                        sampled_tree, sibling_ranks, stacked_drafts, tree_draws, verify_tree)


def _random_tree(size: int, vocab: int, seed: int) -> TokenTree:
    generator = torch.Generator().manual_seed(seed)
    parents = (-1, *(int(torch.randint(0, node, (1,), generator=generator)) for node in range(1, size)))
    return TokenTree(torch.randint(0, vocab, (size,), generator=generator), parents)


def test_closed_form_equals_the_sibling_by_sibling_residual():
    for seed in range(40):
        vocab = 5 if seed % 2 else 50  # a small vocabulary repeats sibling tokens
        tree = _random_tree(12, vocab, seed)
        probs = torch.softmax(torch.randn(12, vocab, generator=torch.Generator().manual_seed(seed)) * 2, dim=-1)
        closed = one_hot_tests(tree.parents_on("cpu"), tree.tokens, probs)
        reference = residual_tests(tree, probs, residual_distribution)
        # accept iff u * draft_mass < target_mass: the closed form scales both sides by (1 - earlier siblings' mass)
        closed_ratio = closed[0] / closed[1].clamp_min(1e-12)
        reference_ratio = reference[0] / reference[1]
        torch.testing.assert_close(closed_ratio[1:], reference_ratio[1:], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(closed[2], reference[2], atol=1e-6, rtol=1e-5)


def test_a_draft_from_an_exhausted_q_changes_nothing():
    """q with two possible tokens, four siblings drawn without replacement: the last two carry q = 0."""
    sampling = SamplingConfig(1.0, top_k=2)
    ctx = StepContext(sampling, torch.Generator().manual_seed(0), GenerationCounters(), target_vocab_size=6)
    logits = torch.tensor([0.0, 3.0, 1.0, -1.0, 2.0, 0.5])
    chosen = choose_children(logits, 4, ctx, replacement=False)
    assert [float(q.sum()) for _, q in chosen] == [1.0, 1.0, 0.0, 0.0]
    assert {int(token) for token, _ in chosen[:2]} == {1, 4}
    tree = TokenTree(torch.stack([torch.tensor(0)] + [token for token, _ in chosen]), (-1, 0, 0, 0, 0),
                     [None] + [q for _, q in chosen])
    probs = torch.softmax(torch.randn(5, 6, generator=torch.Generator().manual_seed(1)), dim=-1)
    target_mass, draft_mass, bonus = residual_tests(tree, probs, residual_distribution)
    assert draft_mass[3] == 0 and draft_mass[4] == 0
    after_two = residual_distribution(residual_distribution(probs[0], chosen[0][1]), chosen[1][1])
    torch.testing.assert_close(bonus[0], after_two)  # the void siblings' rejections left p as it was


def test_a_custom_residual_reads_a_device_grown_tree_first():
    """A tree whose shape is still on the device (as beam drafters leave it) verified with a residual other than
    the default takes the sibling-by-sibling path, which reads the shape first, with the same verdict."""
    tree = _random_tree(10, 7, 3)
    logits = torch.randn(10, 7, generator=torch.Generator().manual_seed(4))
    sampling = SamplingConfig(1.0)

    def custom(target: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
        return residual_distribution(target, draft)

    depths = torch.tensor(tree.depths)
    deferred = DeferredTree(tree.tokens, tree.parents_on("cpu"), depths, int(depths.max()))
    for seed in range(5):
        plain = verify_tree(tree, logits, sampling, torch.Generator().manual_seed(seed), residual=custom)
        grown = verify_tree(deferred, logits, sampling, torch.Generator().manual_seed(seed), residual=custom)
        assert grown == plain
    assert deferred.parents == tree.parents


def test_a_sampled_trees_graphed_form_equals_the_residual_walk():
    """``tree_draws`` (what a graphed verify forward runs for a tree whose drafts all carry q: its sibling ranks
    made once per shape) draws exactly what ``residual_tests`` then ``draw_tests`` do from the same generator."""
    for seed in range(20):
        vocab = 5 if seed % 2 else 40
        generator = torch.Generator().manual_seed(seed)
        parents = [-1]
        for node in range(1, 3 + seed % 7):
            parents.append(int(torch.randint(0, node, (), generator=generator)))
        size = len(parents)
        logits = torch.randn(size, vocab, generator=generator) * 2
        drafts = torch.softmax(torch.randn(size - 1, vocab, generator=generator) * 2, dim=-1)
        tokens = torch.randint(0, vocab, (size,), generator=generator)
        tree = TokenTree(tokens, tuple(parents), [None, *drafts.unbind(0)])
        sampling = SamplingConfig(0.9, top_k=4)
        assert sampled_tree(tree)
        reference = draw_tests(*residual_tests(tree, logits_to_probs(logits, sampling), residual_distribution),
                               torch.Generator().manual_seed(seed))
        graphed = tree_draws(sibling_ranks(tree.parents, torch.device("cpu")), tokens, logits,
                             stacked_drafts(tree, "cpu"), sampling, torch.Generator().manual_seed(seed))
        assert all(torch.equal(a, b) for a, b in zip(graphed, reference)), seed


def test_a_sampled_chains_closed_form_equals_the_residual_walk():
    """``chain_draws`` (what a graphed verify forward runs for a chain whose drafts carry q) draws exactly what the
    general form does (``residual_tests`` then ``draw_tests``) from the same generator: the same masses, the same
    bonus distributions, the same outcomes; and it is what ``verify_tree`` uses on such a chain."""
    for seed in range(20):
        vocab, size = (5 if seed % 2 else 40), 2 + seed % 5
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn(size, vocab, generator=generator) * 2
        drafts = torch.softmax(torch.randn(size - 1, vocab, generator=generator) * 2, dim=-1)
        tokens = torch.randint(0, vocab, (size,), generator=generator)
        tree = TokenTree(tokens, tuple(range(-1, size - 1)), [None, *drafts.unbind(0)])
        sampling = SamplingConfig(0.9, top_k=4)
        assert sampled_chain(tree)
        reference = draw_tests(*residual_tests(tree, logits_to_probs(logits, sampling), residual_distribution),
                               torch.Generator().manual_seed(seed))
        closed = chain_draws(tokens, logits, stacked_drafts(tree, "cpu"), sampling, torch.Generator().manual_seed(seed))
        assert all(torch.equal(a, b) for a, b in zip(closed, reference)), seed
        via_verifier = verify_tree(tree, logits, sampling, torch.Generator().manual_seed(seed))
        walked = verify_tree(tree, logits, sampling, None, draws=reference)
        assert via_verifier == walked
