"""The shared EAGLE-2 beam tree: budget, closure under ancestors, expansion pattern, vocabulary holes."""

import torch

from harness.beam_tree import BeamShape, grow_beam_tree


def _random_expand(vocab, seed):
    generator = torch.Generator().manual_seed(seed)
    calls = []

    def expand(depth, frontier, pool):
        calls.append((depth, list(frontier), [pool.depths[node] for node in frontier]))
        return torch.log_softmax(torch.randn(len(frontier), vocab, generator=generator) * 3, dim=-1)

    return expand, calls


def test_tree_is_budgeted_ranked_and_closed_under_ancestors():
    for seed in range(20):
        shape = BeamShape(top_k=3, depth=4, budget=10)
        expand, calls = _random_expand(50, seed)
        root_logprobs = torch.log_softmax(torch.randn(50, generator=torch.Generator().manual_seed(seed)), dim=-1)
        beam = grow_beam_tree(torch.tensor(7), root_logprobs, expand, shape)
        tree, pool = beam.tree, beam.pool
        assert tree.tokens[0] == 7 and tree.num_drafts == 10
        assert [depth for depth, _, _ in calls] == [1, 2, 3]
        assert all(len(frontier) == 3 and set(depths) == {depth} for depth, frontier, depths in calls)
        assert len(pool.tokens) == shape.pool_size
        chosen = beam.pool_of_node[1:]
        best = sorted(range(len(pool.scores)), key=lambda node: -pool.scores[node])[:10]
        assert sorted(pool.scores[node] for node in chosen) == sorted(pool.scores[node] for node in best)
        for node in range(1, tree.size):  # each tree node's pool parent is its tree parent's pool node
            assert beam.pool_of_node[tree.parents[node]] == pool.parents[beam.pool_of_node[node]]
            assert pool.tokens[beam.pool_of_node[node]] == int(tree.tokens[node])
        assert list(tree.depths) == sorted(tree.depths)


def test_tokens_a_drafter_cannot_produce_are_never_drafted():
    logprobs = torch.full((10,), float("-inf"))
    logprobs[[2, 5]] = torch.log(torch.tensor([0.7, 0.3]))

    def expand(depth, frontier, pool):
        return logprobs.expand(len(frontier), -1)

    beam = grow_beam_tree(torch.tensor(0), logprobs, expand, BeamShape(top_k=4, depth=3, budget=20))
    assert set(beam.tree.tokens[1:].tolist()) <= {2, 5}
    assert beam.tree.num_drafts == 2 + 4 + 8  # 2 children each; every candidate fits the frontier of 4
