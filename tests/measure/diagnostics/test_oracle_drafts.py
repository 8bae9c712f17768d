"""The engine-efficiency oracle: the acceptance schedule, the rewritten trees (host and device shapes alike) and the
decisive random target whose greedy choice is its input token's successor."""

import pytest
import torch
from transformers import DynamicCache

from harness.backend.kv_cache import cache_argument
from harness.measure.diagnostics.oracle_drafts import accepted_at, decisive_target, oracle_tokens
from harness.measure.shapes import SHAPES, scaled_shape, shaped_llama
from harness.trees.tree import DeferredTree, TokenTree, depths_of

PARENTS = (-1, 0, 0, 1, 1, 3)  # depths 0, 1, 1, 2, 2, 3
VOCAB = 50


@pytest.mark.parametrize("tau", [1.0, 2.0, 3.5, 4.25, 6.0])
def test_the_schedule_accepts_tau_minus_one_a_step_spread_evenly(tau):
    counts = [accepted_at(step, tau) for step in range(200)]
    assert sum(counts) == round(200 * (tau - 1))
    assert set(counts) <= {int(tau - 1), int(tau - 1) + 1}
    with pytest.raises(ValueError):
        accepted_at(0, 0.5)


def expected_tokens(continuation: list[int], root_position: int, path: set[int]) -> list[int]:
    depths = depths_of(PARENTS)
    return [7] + [(continuation[root_position + depths[node]] + (node not in path)) % VOCAB
                  for node in range(1, len(PARENTS))]


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("accepted,path", [(0, set()), (1, {1}), (2, {1, 3}), (3, {1, 3, 5}), (5, {1, 3, 5})])
def test_one_path_carries_the_continuation_and_every_other_node_a_wrong_token(deferred, accepted, path):
    tokens = torch.tensor([7, 11, 12, 13, 14, 15])
    if deferred:
        tree = DeferredTree(tokens, torch.tensor(PARENTS), torch.tensor(depths_of(PARENTS)), 3)
    else:
        tree = TokenTree(tokens, PARENTS)
    continuation = list(range(40, 60)) + [VOCAB - 1]  # the last wraps round the vocabulary when it is wrong
    rewritten = oracle_tokens(tree, torch.tensor(continuation), 17, accepted, VOCAB)
    assert rewritten.tolist() == expected_tokens(continuation, 17, path)
    assert rewritten[5] == (0 if 5 not in path else VOCAB - 1)  # position 20: the continuation's last token


def test_a_decisive_target_chooses_the_successor_in_one_token_and_tree_forwards_alike():
    torch.manual_seed(0)
    model = shaped_llama(scaled_shape(SHAPES["llama-3.1-8b"], 64), torch.float32, "cpu")
    successor = decisive_target(model)
    assert sorted(successor.tolist()) == list(range(model.config.vocab_size))
    prompt = torch.randint(model.config.vocab_size, (1, 20))
    with torch.inference_mode():
        logits = model(input_ids=prompt).logits[0]
        assert torch.equal(logits.argmax(-1), successor[prompt[0]])
        top = logits.topk(2, dim=-1).values
        assert bool(((top[:, 0] - top[:, 1]) > 0.1 * top[:, 0].abs()).all())  # by a wide margin
        cache = DynamicCache(config=model.config)
        model(input_ids=prompt[:, :10], use_cache=True, **cache_argument(model, cache))
        step = model(input_ids=prompt[:, 10:11], use_cache=True, **cache_argument(model, cache)).logits[0, -1]
        assert int(step.argmax()) == int(successor[prompt[0, 10]])
