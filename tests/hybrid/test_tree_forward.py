"""A hybrid target's tree pass (``harness.hybrid``): every node's logits equal feeding its root-to-node path one
token at a time through transformers' own Mamba2 recurrence; committing a path by replay leaves the states the
sequential run leaves, and decoding on from them matches; masks that are not trees and paths that are not chains
are refused with one line."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from harness.backend.forward import causal_bias, prefix_visible
from harness.errors import DraftcountError
from harness.hybrid.cache import REWIND, TreeStateCache
from harness.hybrid.forward import tree_forward
from harness.hybrid.ssm_tree import ancestor_matrix, window_indices
from harness.trees.tree import depths_of, tree_attention_bias
from tests.helpers import make_bamba

PARENTS = (-1, 0, 0, 1, 1, 2, 3, 6)  # branching at the root and below, and a path 4 deep (past the window of 4)
TOLERANCE = 1e-5  # max relative error, float32


@pytest.fixture(scope="module", params=[((1,), 1), ((1,), 2), ((), 1)], ids=["hybrid", "two-groups", "mamba2-only"])
def model(request):
    attention, groups = request.param
    return make_bamba(vocab=64, hidden=32, layers=3, attention=attention, groups=groups, seed=4)


def sequential(model, ids: torch.Tensor) -> tuple[torch.Tensor, DynamicCache | None]:
    """transformers' own run: one token at a time on its cache (the Mamba2 recurrence); the logits and the cache.
    A model of Mamba2 layers alone runs in one forward (its chunked scan): transformers' cache needs an attention
    layer to count positions."""
    if not model.config.attn_layer_indices:
        return model(input_ids=ids, use_cache=False).logits[0], None
    cache = DynamicCache(config=model.config)
    logits = [model(input_ids=ids[:, index:index + 1], cache=cache, use_cache=True,
                    position_ids=torch.tensor([[index]])).logits[0, -1] for index in range(ids.shape[1])]
    return torch.stack(logits), cache


def relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours - theirs).abs().max() / theirs.abs().max())


def prefill(model, prompt: torch.Tensor) -> tuple[TreeStateCache, torch.Tensor]:
    cache = TreeStateCache(model.config)
    logits, _ = tree_forward(model, prompt, cache, torch.arange(prompt.shape[1])[None],
                             causal_bias(0, prompt.shape[1], torch.float32, torch.device("cpu")))
    return cache, logits


def feed_tree(model, cache: TreeStateCache, tokens: torch.Tensor, parents: tuple[int, ...]) -> torch.Tensor:
    past = cache.get_seq_length()
    bias = tree_attention_bias(parents, [], list(range(len(parents))), torch.float32, torch.device("cpu"))
    mask = prefix_visible(bias, past + len(parents))
    if mask is None and len(parents) > 1:  # a chain: causal (as run_model makes it)
        mask = causal_bias(past, len(parents), torch.float32, torch.device("cpu"))
    positions = (past + torch.tensor(depths_of(parents)))[None]
    return tree_forward(model, tokens[None], cache, positions, mask)[0][0]


def random_case(seed: int, prompt_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random prompt (1, prompt_len) and tokens for the nodes of PARENTS."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 64, (1, prompt_len), generator=generator),
            torch.randint(0, 64, (len(PARENTS),), generator=generator))


def path_to(parents: tuple[int, ...], node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


@torch.no_grad()
def test_a_chain_equals_transformers_full_forward_hidden_states_included(model):
    prompt = torch.randint(0, 64, (1, 11), generator=torch.Generator().manual_seed(0))
    full = model(input_ids=prompt, output_hidden_states=True, use_cache=False)
    cache = TreeStateCache(model.config)
    logits, states = tree_forward(model, prompt, cache, torch.arange(11)[None],
                                  causal_bias(0, 11, torch.float32, torch.device("cpu")), hidden=True)
    assert relative_error(logits, full.logits) < TOLERANCE
    assert len(states) == len(full.hidden_states)
    assert all(relative_error(ours, theirs) < TOLERANCE for ours, theirs in zip(states, full.hidden_states))


@torch.no_grad()
def test_tree_pass_logits_equal_each_path_fed_one_token_at_a_time(model):
    prompt, tokens = random_case(seed=1, prompt_len=6)
    cache, _ = prefill(model, prompt)
    logits = feed_tree(model, cache, tokens, PARENTS)
    for node in range(len(PARENTS)):
        ids = torch.cat([prompt[0], tokens[path_to(PARENTS, node)]])[None]
        assert relative_error(logits[node], sequential(model, ids)[0][-1]) < TOLERANCE, node


@torch.no_grad()
def test_level_by_level_feeds_equal_one_feed(model):
    """A draft LM feeds its tree a level at a time: the nodes fed earlier are pending ancestors of the later."""
    prompt, tokens = random_case(seed=2, prompt_len=5)
    whole, _ = prefill(model, prompt)
    once = feed_tree(model, whole, tokens, PARENTS)
    parts, _ = prefill(model, prompt)
    levels = depths_of(PARENTS)
    fed: list[int] = []
    for depth in range(max(levels) + 1):
        level = [node for node in range(len(PARENTS)) if levels[node] == depth]
        bias = tree_attention_bias(PARENTS, fed, level, torch.float32, torch.device("cpu"))
        past = parts.get_seq_length()
        logits, _ = tree_forward(model, tokens[level][None], parts, (5 + torch.tensor([depth] * len(level)))[None],
                                 prefix_visible(bias, past + len(level)))
        assert relative_error(logits[0], once[level]) < TOLERANCE, depth
        fed += level


@torch.no_grad()
def test_a_committed_path_leaves_the_sequential_state_and_decoding_goes_on(model):
    prompt, tokens = random_case(seed=3, prompt_len=7)
    cache, _ = prefill(model, prompt)
    feed_tree(model, cache, tokens, PARENTS)
    path = path_to(PARENTS, 7)  # 0, 1, 3, 6, 7: deeper than the convolution's window
    cache.keep(7, path)
    cache.fold(len(cache.parents))  # every kept position into the states: compare them with transformers'
    ids = torch.cat([prompt[0], tokens[path]])[None]
    _, theirs = sequential(model, ids)
    for index in cache.mamba if theirs is not None else ():
        assert relative_error(cache.windows[index], theirs.layers[index].conv_states[0][0]) < TOLERANCE
        assert relative_error(cache.states[index], theirs.layers[index].recurrent_states[0][0]) < TOLERANCE
    for index in set(range(model.config.num_hidden_layers)) - cache.mamba:  # (none in a Mamba2 LM)
        assert relative_error(cache.layers[index].keys, theirs.layers[index].keys) < TOLERANCE
    assert cache.get_seq_length() == ids.shape[1]
    following = torch.tensor([9, 10, 11])
    ours = feed_tree(model, cache, following, (-1, 0, 1))
    assert relative_error(ours, sequential(model, torch.cat([ids[0], following])[None])[0][-3:]) < TOLERANCE


@torch.no_grad()
def test_crops_go_back_within_the_rewind_and_no_further(model):
    prompt = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(5))
    cache, _ = prefill(model, prompt)
    feed_tree(model, cache, torch.tensor([1, 2, 3, 4]), (-1, 0, 1, 2))
    cache.crop(8)  # a second crop inside one step (Polybasic's stages): back 2 of the 4 fed
    ours = feed_tree(model, cache, torch.tensor([5]), (-1,))
    theirs = sequential(model, torch.cat([prompt[0], torch.tensor([1, 2, 5])])[None])[0][-1]
    assert relative_error(ours[0], theirs) < TOLERANCE
    feed_tree(model, cache, torch.arange(REWIND + 4) % 64, tuple(range(-1, REWIND + 3)))
    cache.keep(cache.get_seq_length(), [])
    with pytest.raises(DraftcountError, match="cannot go back") as refused:
        cache.crop(4)
    assert "\n" not in str(refused.value)


def test_a_mask_that_is_not_a_tree_and_a_kept_set_that_is_not_a_path_are_refused():
    model = make_bamba(vocab=16, hidden=16, layers=2, attention=(1,))
    cache, _ = prefill(model, torch.tensor([[1, 2, 3]]))
    bias = tree_attention_bias((-1, 0, 0), [], [0, 1, 2], torch.float32, torch.device("cpu"))
    bias[0, 0, 2, 1], bias[0, 0, 2, 0] = 0.0, bias.min()  # node 2 sees node 1 but not node 1's parent
    with pytest.raises(DraftcountError, match="exactly its ancestors"):
        tree_forward(model, torch.tensor([[4, 5, 6]]), cache, torch.tensor([[3, 4, 4]]), prefix_visible(bias, 6))
    cache, _ = prefill(model, torch.tensor([[1, 2, 3]]))
    feed_tree(model, cache, torch.tensor([4, 5, 6]), (-1, 0, 0))
    with pytest.raises(DraftcountError, match="not one path"):
        cache.keep(3, [0, 2, 1])


def test_the_tree_helpers():
    assert ancestor_matrix((-1, 0, 0, 1)).int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    # window of 3 over [3 committed columns, nodes]: node 3 = (committed col 2 ->) 0 -> 1 -> 3
    assert window_indices((-1, 0, 0, 1), 3).tolist() == [[1, 2, 3], [2, 3, 4], [2, 3, 5], [3, 4, 6]]
