"""The device-side parts of graphed forwards and blocks (``harness.backend.cuda_graphs``), on the CPU: the full-width
mask built from a device ``past`` equals the host-built one, a tree's mask built from its parents equals the host's
ancestor mask, and a graphed block runs its body inside a graph region and sets the cache's length (eagle's graphed draft,
``methods.eagle.graphed``, is checked lossless in tests/methods/test_eagle.py)."""

import torch

from harness.backend.cuda_graphs import (GRAPHED_REGION, GraphedForwards, causal_block, device_full_width_mask,
                                         write_full_width_bias)
from harness.backend.static_cache import new_static_cache, static_layers
from harness.trees.tree import AncestorBias, TokenTree, tree_attention_bias
from transformers import LlamaConfig


def _config() -> LlamaConfig:
    return LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2)


def test_device_mask_equals_the_host_built_one():
    capacity, low = 16, torch.finfo(torch.float32).min
    generator = torch.Generator(device="cpu").manual_seed(0)
    for past, count, width in [(5, 1, None), (5, 3, None), (4, 3, 3), (6, 2, 5), (1, 4, 5)]:
        bias = None if width is None else torch.where(torch.rand(count, width, generator=generator) > 0.5, 0.0, low)
        expected = torch.zeros((1, 1, count, capacity))
        write_full_width_bias(expected, bias, past, count)
        tail = causal_block(count, torch.float32, torch.device("cpu")) if bias is None else bias
        built = device_full_width_mask(torch.tensor(past), tail, torch.arange(capacity), count)
        assert torch.equal(built, expected), (past, count, width)


def test_ancestor_bias_equals_the_host_tree_mask():
    parents = (-1, 0, 0, 1, 1, 3, 2)
    tree = TokenTree(torch.arange(len(parents)), parents)
    expected = tree_attention_bias(tree.parents, [], list(range(tree.size)), torch.float32, "cpu")[0, 0]
    built = AncestorBias(torch.tensor(parents), 3, torch.float32)
    assert torch.equal(built.build(built.source), expected)


def test_a_block_runs_inside_a_graph_region_and_sets_the_length():
    cache = new_static_cache(_config(), 32, torch.float32, torch.device("cpu"))
    graphs = GraphedForwards(torch.device("cpu"), torch.float32, capture=False)
    seen = []

    def body(buffers, past):
        seen.append((GRAPHED_REGION.get(), int(past)))
        return (buffers["x"] * 2 + past,)

    for past in (3, 7):
        (out,) = graphs.run_block("twice", cache, past, past + 5, {"x": torch.ones(2)}, body)
        assert torch.equal(out, torch.full((2,), 2.0 + past))
        assert static_layers(cache)[0].get_seq_length() == past + 5
    assert seen == [(True, 3), (True, 7)] and len(graphs.graphs) == 1


def test_a_capture_registers_the_generator_its_body_draws_from(monkeypatch):
    """The GPU-only capture path, with torch.cuda's graph API replaced by recorders: a generator the body draws
    from is registered with the graph before capture begins (CUDA captures only the default generator's draws
    otherwise), warm-up runs first, and nothing is registered for a body that draws from the default one."""
    import contextlib

    events = []

    class Recorder:
        def register_generator_state(self, generator):
            events.append(("register", generator))

        def wait_stream(self, other):
            pass

        def replay(self):
            events.append("replay")

    @contextlib.contextmanager
    def capturing(graph, pool=None):
        events.append("capture")
        yield

    monkeypatch.setattr(torch.cuda, "CUDAGraph", Recorder)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: Recorder())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Recorder())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "graph", capturing)
    graphs = GraphedForwards(torch.device("cpu"), torch.float32, capture=False)
    graphs.capture = True  # the capture path, on the CPU
    generator = torch.Generator().manual_seed(0)

    def body():
        events.append("body")
        return (torch.rand(2, generator=generator),)

    for drawn_from in (generator, None):
        events.clear()
        graphs._replay(graphs.graphs.setdefault(drawn_from is None, _blank_block()), body, drawn_from)
        registered = [("register", generator)] if drawn_from is not None else []
        assert events == ["body", "body", *registered, "capture", "body", "replay"]


def _blank_block():
    from harness.backend.cuda_graphs import _Block

    return _Block({}, torch.zeros((), dtype=torch.long))


def test_a_graphed_path_gather_survives_a_captures_warm_ups(monkeypatch):
    """``keep_tree_path`` with a graph runner gathers a path within each layer's own buffer, reading slots it then
    overwrites: a capture's two eager warm-ups (``tests.capture_warmups``) would gather again from what the first wrote
    unless the block restores them (``protect``). The kept entries equal the eager gather's, with and without them."""
    from harness.backend.kv_cache import keep_tree_path
    from tests.capture_warmups import warmed_up

    def filled() -> tuple:
        cache = new_static_cache(_config(), 32, torch.float32, torch.device("cpu"))
        for layer in static_layers(cache):
            numbered = torch.arange(layer.key_buffer.numel(), dtype=torch.float32)
            layer.key_buffer.copy_(numbered.view_as(layer.key_buffer))
            layer.value_buffer.copy_(-layer.key_buffer)
            layer.set_length(20)
        return cache

    prefix, path = 10, [0, 2, 5, 7]  # leaves the tree's first branch: slot 12 is read (node 2) and then written
    expected = filled()
    keep_tree_path(expected, prefix, path)  # eager
    for emulate in (False, True):
        if emulate:
            monkeypatch.setattr(GraphedForwards, "_replay", warmed_up)
        cache = filled()
        graphs = GraphedForwards(torch.device("cpu"), torch.float32, capture=False)
        keep_tree_path(cache, prefix, path, graphs)
        assert graphs.calls == 0 and len(graphs.graphs) == 1  # the gather ran as a block (no model forward)
        for mine, theirs in zip(static_layers(cache), static_layers(expected)):
            assert mine.get_seq_length() == theirs.get_seq_length() == prefix + len(path)
            assert torch.equal(mine.keys, theirs.keys) and torch.equal(mine.values, theirs.values), emulate
