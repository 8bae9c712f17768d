"""Token trees, tree attention and KV-cache path keeping against plain sequential forwards."""

import inspect

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from harness.backend.forward import ForwardTally, positions, prefix_visible, run_model
from harness.backend.kv_cache import cache_argument, cache_length, crop_cache, keep_tree_path, new_cache
from harness.trees.tree import TokenTree, root_only


def _tree() -> TokenTree:
    # root -> a, b ; a -> c, d ; b -> e
    return TokenTree(torch.tensor([5, 7, 9, 11, 13, 15]), (-1, 0, 0, 1, 1, 2))


def test_tree_structure():
    tree = _tree()
    assert tree.depths == (0, 1, 1, 2, 2, 2)
    assert tree.children[0] == (1, 2) and tree.children[1] == (3, 4) and tree.children[5] == ()
    assert tree.path_to(4) == [0, 1, 4]
    assert tree.position_ids(10).tolist() == [[10, 11, 11, 12, 12, 12]]
    assert not tree.is_chain and TokenTree(torch.tensor([1, 2]), (-1, 0)).is_chain
    assert root_only(torch.tensor(3)).size == 1


def test_attention_bias_marks_ancestors_only():
    bias = _tree().attention_bias(dtype=torch.float32)
    assert bias.shape == (1, 1, 6, 6)  # the tree's own keys; run_model adds the prefix, visible to all
    widened = prefix_visible(bias, 3 + 6)[0, 0]
    visible = widened == 0
    assert visible[:, :3].all()
    assert visible[4, 3:].tolist() == [True, True, False, False, True, False]
    assert visible[5, 3:].tolist() == [True, False, True, False, False, True]
    assert (widened[~visible] == torch.finfo(torch.float32).min).all()
    assert TokenTree(torch.tensor([1, 2]), (-1, 0)).attention_bias(torch.float32) is None


@pytest.mark.parametrize("bad_parents", [(0, 0), (-1, 1), (-1, 0, 3)])
def test_malformed_trees_are_rejected(bad_parents):
    with pytest.raises(ValueError):
        TokenTree(torch.zeros(len(bad_parents), dtype=torch.long), bad_parents)


def test_tree_forward_equals_sequential_forwards(random_pair):
    target, _ = random_pair
    prompt = torch.tensor([[3, 1, 4, 1, 5, 9, 2]])
    tree = _tree()
    cache = new_cache(target.config)
    with torch.no_grad():
        run_model(target, prompt, cache, positions(0, 7, target.device), ForwardTally())
        out = run_model(target, tree.tokens[None], cache, tree.position_ids(7), ForwardTally(),
                        attention_bias=tree.attention_bias(target.dtype))
        for node in range(tree.size):
            path_tokens = tree.tokens[tree.path_to(node)]
            reference = target.model(torch.cat([prompt[0], path_tokens])[None]).logits[0, -1]
            torch.testing.assert_close(out.logits[0, node], reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("path", [[0], [0, 1], [0, 2, 5], [0, 1, 4]])
def test_keep_tree_path_leaves_the_cache_of_that_path(random_pair, path):
    target, _ = random_pair
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    tree = _tree()
    cache = new_cache(target.config)
    with torch.no_grad():
        run_model(target, prompt, cache, positions(0, 5, target.device), ForwardTally())
        run_model(target, tree.tokens[None], cache, tree.position_ids(5), ForwardTally(),
                  attention_bias=tree.attention_bias(target.dtype))
        keep_tree_path(cache, 5, path)
        assert cache_length(cache) == 5 + len(path)
        nxt = torch.tensor([[8]])
        continued = run_model(target, nxt, cache, positions(5 + len(path), 1, target.device), ForwardTally())
        full = torch.cat([prompt[0], tree.tokens[path], nxt[0]])[None]
        torch.testing.assert_close(continued.logits[0, -1], target.model(full).logits[0, -1], atol=1e-5, rtol=1e-5)


def test_crop_leaves_a_layer_at_or_under_the_length_untouched(random_pair):
    """An autoregressive step keeps everything it fed: its crop must not replace the layers' tensors (no op);
    a longer layer is cut, and an empty cache (nothing fed yet) is left as it is."""
    target, _ = random_pair
    cache = new_cache(target.config)
    crop_cache(cache, 3)  # nothing fed yet: no layer holds a tensor
    with torch.no_grad():
        run_model(target, torch.tensor([[3, 1, 4, 1, 5]]), cache, positions(0, 5, target.device), ForwardTally())
    before = [(layer.keys, layer.values) for layer in cache.layers]
    for length in (5, 9):
        crop_cache(cache, length)
        assert all(layer.keys is keys and layer.values is values
                   for layer, (keys, values) in zip(cache.layers, before))
    crop_cache(cache, 3)
    assert cache_length(cache) == 3 and all(layer.keys.shape[-2] == 3 for layer in cache.layers)


def test_forward_tally_counts_tokens_and_flops(random_pair):
    target, _ = random_pair
    tally = ForwardTally()
    cache = new_cache(target.config)
    with torch.no_grad():
        run_model(target, torch.tensor([[1, 2, 3]]), cache, positions(0, 3, target.device), tally, logits_to_keep=1)
        run_model(target, torch.tensor([[4]]), cache, positions(3, 1, target.device), tally)
    cost = target.cost
    assert tally.forwards == 2 and tally.tokens == 4
    assert tally.flops == pytest.approx(cost.forward_flops(3, 3, 1) + cost.forward_flops(1, 4))
    assert cost.head_params == target.vocab_size * target.config.hidden_size


def test_the_cache_goes_under_the_keyword_this_transformers_takes(random_pair):
    """transformers 5.24 renamed the forwards' ``past_key_values`` to ``cache`` (the old name warns, and goes in
    5.40); earlier 5.x (the GPU box has 5.17) knows only the old one. The keyword chosen is the one each module's
    forward declares, and a cached forward fed through it extends the cache."""
    target, _ = random_pair
    layer = target.model.model.layers[0]
    for module in (target.model, target.model.model, layer):
        parameters = inspect.signature(type(module).forward).parameters
        (keyword,) = cache_argument(module, None)
        assert keyword in parameters
        assert keyword == ("cache" if "cache" in parameters else "past_key_values")
    assert isinstance(layer, LlamaDecoderLayer)
    cache = new_cache(target.config)
    with torch.no_grad():
        target.model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True, **cache_argument(target.model, cache))
    assert cache_length(cache) == 3
