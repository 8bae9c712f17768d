"""The shared EAGLE-2 beam tree: budget, closure under ancestors, the same tree as a plain host-side reference,
expansion pattern, the deferred shape (device-built mask and positions), and the frontier mask."""

import pytest
import torch

from harness.trees.beam import Frontier, frontier_attention_bias, grow_beam_tree
from harness.trees.beam_shape import BeamShape
from harness.errors import DraftcountError
from harness.trees.tree import TokenTree, tree_attention_bias


def _random_expand(vocab, seed, ties=False):
    generator = torch.Generator().manual_seed(seed)
    calls, rows = [], []

    def expand(frontier):
        calls.append(frontier)
        logits = torch.randn(frontier.tokens.shape[0], vocab, generator=generator) * 3
        if ties:  # coarse values: many equal cumulative scores, so tie-breaking matters
            logits = logits.round()
        rows.append(torch.log_softmax(logits, dim=-1))
        return rows[-1]

    return expand, calls, rows


def reference_tree(root_logprobs, rows, shape):
    """EAGLE-2's expand-and-rerank written plainly on the host, given the rows ``expand`` returned.
    Returns (tokens, parents) of the tree: nodes depth-major, then by score, then by pool order."""
    k = shape.top_k
    pool = []  # (score, token, parent pool index, depth)
    scores, tokens = root_logprobs.topk(k)
    frontier = []
    for score, token in zip(scores.tolist(), tokens.tolist()):
        pool.append((score, token, -1, 1))
        frontier.append(len(pool) - 1)
    for depth, row in enumerate(rows, start=2):
        new = []
        child_scores, child_tokens = row.topk(k, dim=-1)
        for r, parent in enumerate(frontier):
            for c in range(k):
                pool.append((pool[parent][0] + float(child_scores[r, c]), int(child_tokens[r, c]), parent, depth))
                new.append(len(pool) - 1)
        frontier = sorted(new, key=lambda node: (-pool[node][0], node))[:k]
    finite = [node for node in range(len(pool)) if pool[node][0] != float("-inf")]
    chosen = sorted(finite, key=lambda node: (-pool[node][0], node))[: shape.budget]
    chosen = sorted(chosen, key=lambda node: (pool[node][3], -pool[node][0], node))
    index = {-1: 0} | {node: i for i, node in enumerate(chosen, start=1)}
    return [pool[node][1] for node in chosen], (-1, *(index[pool[node][2]] for node in chosen))


def test_tree_matches_the_reference_and_is_budgeted_and_closed_under_ancestors():
    for seed in range(30):
        shape = BeamShape(top_k=3, depth=4, budget=10)
        expand, calls, rows = _random_expand(50, seed, ties=seed % 2 == 1)
        root_logprobs = torch.log_softmax(torch.randn(50, generator=torch.Generator().manual_seed(seed)), dim=-1)
        beam = grow_beam_tree(torch.tensor(7), root_logprobs, expand, shape)
        tree = beam.tree
        with pytest.raises(DraftcountError, match="still on the device"):
            tree.parents
        tree.resolve()
        assert tree.tokens[0] == 7 and tree.num_drafts == 10
        assert [frontier.depth for frontier in calls] == [1, 2, 3]
        assert all(frontier.tokens.shape == (3,) for frontier in calls)
        tokens, parents = reference_tree(root_logprobs, rows, shape)
        assert tree.tokens[1:].tolist() == tokens and tree.parents == parents
        assert beam.pool_scores.shape[0] == shape.pool_size
        for node in range(1, tree.size):  # each tree node's pool parent is its tree parent's pool node
            assert beam.pool_of_node[tree.parents[node]] == int(beam.pool_parents[beam.pool_of_node[node]])
        assert list(tree.depths) == sorted(tree.depths)


def test_frontier_rows_point_at_parents_and_slots_name_them():
    expand, calls, rows = _random_expand(40, 3)
    shape = BeamShape(top_k=4, depth=4, budget=30)
    root_logprobs = torch.log_softmax(torch.randn(40, generator=torch.Generator().manual_seed(3)), dim=-1)
    beam = grow_beam_tree(torch.tensor(1), root_logprobs, expand, shape)
    beam.tree.resolve()
    for earlier, later in zip(calls, calls[1:]):  # a frontier node's token is one of its parent's top-k children
        parent_rows = rows[earlier.depth - 1][later.parent_rows]
        top = parent_rows.topk(4, dim=-1).indices
        assert all(int(token) in top[i].tolist() for i, token in enumerate(later.tokens))
    tree = beam.tree
    for node in range(1, tree.size):
        slot = beam.parent_slots[node]
        if tree.depths[node] == 1:
            assert slot is None
        else:
            depth, row = slot
            assert depth == tree.depths[node] - 1 and int(calls[depth - 1].tokens[row]) == int(tree.tokens[tree.parents[node]])


def test_deferred_tree_masks_and_positions_equal_the_host_ones():
    """The verify forward's positions and tree mask, built on the device from the deferred shape, equal those
    built on the host once the shape is read; the verifier's read brings the shape."""
    expand, _, _ = _random_expand(30, 5)
    root_logprobs = torch.log_softmax(torch.randn(30, generator=torch.Generator().manual_seed(5)), dim=-1)
    tree = grow_beam_tree(torch.tensor(2), root_logprobs, expand, BeamShape(top_k=3, depth=5, budget=14)).tree
    positions, bias = tree.position_ids(9), tree.attention_bias(torch.float32)
    tokens, choices = tree.read_with([tree.tokens, torch.zeros(tree.size, dtype=torch.long)])
    assert tokens == tree.tokens.tolist() and choices == [0] * tree.size
    host = TokenTree(tree.tokens, tree.parents)
    assert torch.equal(positions, host.position_ids(9))
    assert torch.equal(bias, tree_attention_bias(tree.parents, [], list(range(tree.size)), torch.float32, "cpu"))


def test_frontier_mask_equals_the_tree_mask_over_the_fed_frontiers():
    """Feeding frontier d after frontiers 1..d-1: each node sees the prefix, its ancestors and itself."""
    generator = torch.Generator().manual_seed(0)
    k, prefix = 3, 5
    frontiers = [Frontier(1, torch.arange(k), torch.zeros(k, dtype=torch.long))]
    for depth in range(2, 5):
        frontiers.append(Frontier(depth, torch.arange(k), torch.randint(0, k, (k,), generator=generator)))
    parents = [-1]  # node 0 = the root; frontier d's row r = node 1 + (d-1)k + r
    for frontier in frontiers:
        base = 1 + (frontier.depth - 2) * k
        parents += [0 if frontier.depth == 1 else base + int(row) for row in frontier.parent_rows]
    for depth in range(1, 5):
        bias = frontier_attention_bias(frontiers[:depth], prefix, torch.float32)[0, 0]
        fed = list(range(1, 1 + (depth - 1) * k))
        queries = list(range(1 + (depth - 1) * k, 1 + depth * k))
        expected = tree_attention_bias(tuple(parents), fed, queries, torch.float32, "cpu")
        assert (bias[:, :prefix] == 0).all()
        if expected is None:  # depth 1 with k = 1 would be causal; not this case
            raise AssertionError("expected a tree mask")
        assert torch.equal(bias[:, prefix:], expected[0, 0])


def _path_logprobs(path: tuple[int, ...], vocab: int = 50) -> torch.Tensor:
    """A fixed draft distribution for the node reached by ``path`` (no ties)."""
    generator = torch.Generator().manual_seed(hash(path) % (2**31))
    return torch.log_softmax(torch.randn(vocab, generator=generator) * 2, dim=-1)


def eagle_top_k_generate(top_k: int, depth: int, total_token: int) -> set[tuple[int, ...]]:
    """The draft nodes EAGLE's ``topK_genrate`` (their eagle/model/cnets.py) verifies for ``--top-k``, ``--depth``
    and ``--total-token``, restated: the root's top-k, then ``depth`` expansions of the k best by cumulative
    score, each adding k x k candidates; the ``total_token - 1`` best of the pool (the root is prepended)."""
    scores, tokens = _path_logprobs(()).topk(top_k)
    pool = [((int(token),), float(score)) for token, score in zip(tokens, scores)]
    frontier = [path for path, _ in pool]
    frontier_scores = scores
    for _ in range(depth):
        candidates = []
        for path, score in zip(frontier, frontier_scores):
            child_scores, child_tokens = _path_logprobs(path).topk(top_k)
            candidates += [(path + (int(token),), float(score + child)) for token, child in zip(child_tokens, child_scores)]
        pool += candidates
        best = sorted(range(len(candidates)), key=lambda index: -candidates[index][1])[:top_k]
        frontier = [candidates[index][0] for index in best]
        frontier_scores = torch.tensor([candidates[index][1] for index in best])
    chosen = sorted(pool, key=lambda item: -item[1])[: total_token - 1]
    return {path for path, _ in chosen}


@pytest.mark.parametrize("top_k, depth, budget", [(4, 5, 24), (10, 6, 59), (8, 5, 31), (3, 3, 7)])
def test_depth_and_budget_map_to_eagles_depth_and_total_token(top_k, depth, budget):
    """docs/methods.md: our (top_k, depth, budget) = EAGLE's --top-k k, --depth depth - 1, --total-token
    budget + 1 (and SGLang's num_steps depth, num_draft_tokens budget + 1): the same nodes are verified."""
    frontiers: list[list[tuple[int, ...]]] = []  # the paths of each expanded frontier

    def expand(frontier: Frontier) -> torch.Tensor:
        if not frontiers:  # depth 1: the root's children
            paths = [(int(token),) for token in frontier.tokens]
        else:
            paths = [frontiers[-1][int(row)] + (int(token),)
                     for row, token in zip(frontier.parent_rows, frontier.tokens)]
        frontiers.append(paths)
        return torch.stack([_path_logprobs(path) for path in paths])

    tree = grow_beam_tree(torch.tensor(0), _path_logprobs(()), expand, BeamShape(top_k, depth, budget)).tree
    tree.resolve()
    paths: dict[int, tuple[int, ...]] = {0: ()}
    for node in range(1, len(tree.parents)):  # parents come before their children
        paths[node] = paths[tree.parents[node]] + (int(tree.tokens[node]),)
    ours = {path for node, path in paths.items() if node}
    assert len(frontiers) == depth - 1  # head forwards after the catch-up: EAGLE's --depth
    assert ours == eagle_top_k_generate(top_k, depth - 1, budget + 1)


def _sampled_draws(vocab, seed):
    from functools import partial

    from harness.trees.beam import BeamDraws
    from harness.verify.sampling import SamplingConfig, logits_to_probs

    generator = torch.Generator().manual_seed(seed)
    return BeamDraws(partial(logits_to_probs, sampling=SamplingConfig(1.0)), generator, vocab), generator


def test_a_sampled_tree_takes_every_draw_in_a_fixed_order_each_carrying_its_q():
    """The sampled convention: depth by depth every expanded node's draws (sampled_quota, sampled_order), siblings
    in draw order, each with the q it was drawn from (earlier siblings removed); frontier rows are tree nodes."""
    from harness.trees.beam import sampled_order, sampled_quota

    assert sampled_quota(BeamShape(3, 4, 10), 3) == [3, 7] and sampled_quota(BeamShape(1, 4, 9), 1) == [1, 1, 1, 1]
    assert sampled_order(2) == [0, 1, 2, 3] and sampled_order(3)[:4] == [0, 1, 3, 2]
    for seed in range(10):
        draws, generator = _sampled_draws(20, seed)
        expand, calls, _ = _random_expand(20, seed)
        shape = BeamShape(top_k=3, depth=3, budget=10, drafts="sampled")
        root_logprobs = torch.log_softmax(torch.randn(20, generator=generator), dim=-1)
        beam = grow_beam_tree(torch.tensor(7), root_logprobs, expand, shape, None, draws)
        tree = beam.tree
        tree.resolve()
        assert tree.num_drafts == 10 and list(tree.depths) == sorted(tree.depths) and len(calls) == 1
        for kids in tree.children:
            seen = set()
            for kid in kids:  # each later sibling drawn from q without the earlier ones, renormalised
                q, token = tree.draft_probs[kid], int(tree.tokens[kid])
                assert q.shape == (20,) and q[token] > 0 and float(q.sum()) == pytest.approx(1.0, abs=1e-5)
                assert all(float(q[earlier]) == 0 for earlier in seen)
                seen.add(token)
            assert len(seen) == len(kids)
        for node in range(1, tree.size):  # the frontier expanded at depth 1 is made of tree nodes
            assert beam.pool_of_node[tree.parents[node]] == int(beam.pool_parents[beam.pool_of_node[node]])


def test_a_sampled_tree_verifies_to_the_targets_distribution():
    """The first token a sampled tree yields (accepted or bonus) follows the target's distribution: the draws'
    inclusion never depends on their own tokens (chi-square over 1000 trees at p > 1e-3)."""
    from collections import Counter

    from harness.verify.sampling import SamplingConfig, logits_to_probs
    from harness.verify.token_level import verify_tree
    from tests.helpers import chi_square_test

    vocab, trials = 6, 1000
    target = torch.log_softmax(torch.tensor([2.0, 1.5, 0.5, 0.0, -1.0, 0.3]), dim=-1)
    draft = torch.log_softmax(torch.tensor([0.0, 2.0, 1.0, 1.0, 0.5, -2.0]), dim=-1)
    draws, generator = _sampled_draws(vocab, 0)
    counts = Counter()
    for _ in range(trials):
        beam = grow_beam_tree(torch.tensor(0), draft, lambda frontier: draft.expand(frontier.tokens.shape[0], -1),
                              BeamShape(top_k=2, depth=2, budget=3, drafts="sampled"), None, draws)
        verdict = verify_tree(beam.tree, target.expand(beam.tree.size, -1), SamplingConfig(1.0), generator)
        counts[verdict.new_tokens[0]] += 1
    probabilities = dict(enumerate(logits_to_probs(target, SamplingConfig(1.0)).tolist()))
    assert chi_square_test(counts, probabilities).pvalue > 1e-3
