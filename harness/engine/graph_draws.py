"""Sampling verification inside the target's graphed verify forward: what ``EngineRuntime.verify`` asks it to draw.

At T > 0 the default verifier needs, per tree node, its acceptance test's outcome and the bonus token drawn there
(``harness.verify.token_level.sampling_draws``). Made inside the verify forward's graph they cost no launch of
their own: for a tree of deterministic drafts (q = 1; ``one_hot_draws``, its parents made in the graph for a chain,
built there for a device tree's mask, or copied in), for a chain whose drafts carry their q (``chain_draws``, the
q's copied in), and for a tree whose drafts all carry theirs (``tree_draws``: its sibling ranks made once per shape,
the q's copied in; one graph per tree shape). A tree mixing q's and deterministic drafts is verified outside the
graph (``residual_tests``).

The draws come from the run's generator, in the eager verifier's order, so a CPU run (graphs emulated) gives the
same tokens as the eager engine with the same seed. A CUDA graph replays the draws of the generator it was captured
with: the runtime's ``GraphGenerator``, reseeded from each run's seed on a stream of its own.
"""

from __future__ import annotations

import torch

from harness.backend.cuda_graphs import Bias
from harness.backend.forward import InGraphDraws
from harness.trees.tree import TokenTree
from harness.verify.sampling import SamplingConfig
from harness.verify.token_level import (Draws, chain_draws, one_hot_draws, sampled_chain, sampled_tree, sibling_ranks,
                                       stacked_drafts, tree_draws)


def verify_draws(tree: TokenTree, bias: Bias, sampling: SamplingConfig, generator: torch.Generator | None,
                 device: torch.device) -> InGraphDraws | None:
    """What the verify forward over ``tree`` (its mask ``bias``) draws inside its graph, or None (a tree mixing
    drafts that carry q with deterministic ones, or a tree grown on the device whose drafts carry q: drawn
    outside)."""
    settings = (sampling.temperature, sampling.top_k, sampling.top_p)
    if sampled_chain(tree):
        return InGraphDraws(("chain_draws", *settings), _chain(sampling, generator),
                            {"drafts": stacked_drafts(tree, device)}, generator)
    if sampled_tree(tree):
        ranks = sibling_ranks(tree.parents, device)
        return InGraphDraws(("tree_draws", tree.parents, *settings), _tree(sampling, generator, ranks),
                            {"drafts": stacked_drafts(tree, device)}, generator,
                            keep=tuple(index for pair in ranks for index in pair))
    if any(q is not None for q in tree.draft_probs[1:]):
        return None
    inputs = {"parents": tree.parents_on(device)} if isinstance(bias, torch.Tensor) else {}
    return InGraphDraws(("one_hot_draws", *settings), _one_hot(sampling, generator), inputs, generator)


def _one_hot(sampling: SamplingConfig, generator: torch.Generator | None):
    def draw(logits: torch.Tensor, buffers: dict[str, torch.Tensor]) -> Draws:
        tokens = buffers["input_ids"][0]
        parents = buffers.get("parents", buffers.get("source"))  # a host tree's, or a device tree's mask's source
        if parents is None:  # a chain (its mask is causal): made here
            parents = torch.arange(-1, tokens.shape[0] - 1, device=tokens.device)
        return one_hot_draws(parents, tokens, logits, sampling, generator)
    return draw


def _tree(sampling: SamplingConfig, generator: torch.Generator | None, ranks):
    def draw(logits: torch.Tensor, buffers: dict[str, torch.Tensor]) -> Draws:
        return tree_draws(ranks, buffers["input_ids"][0], logits, buffers["drafts"], sampling, generator)
    return draw


def _chain(sampling: SamplingConfig, generator: torch.Generator | None):
    def draw(logits: torch.Tensor, buffers: dict[str, torch.Tensor]) -> Draws:
        return chain_draws(buffers["input_ids"][0], logits, buffers["drafts"], sampling, generator)
    return draw


VERIFY_STREAM = 0x5DEECE66D  # mixed into a run's seed for the verify graphs' stream (apart from the run's own draws)


class GraphGenerator:
    """What captured verify graphs draw from on a GPU: one generator per runtime, registered with each graph at
    capture (a CUDA graph replays the draws of the generator it was captured with), reseeded whenever a new run
    generator comes (its initial seed mixed with ``VERIFY_STREAM``: a stream apart from the run generator's own,
    which an eager drafter's sampled drafts come from, so that the verifier's uniforms never repeat the drafts'
    draws; a graphed draft block draws from this same generator, each replay taking its own range of it).
    The same seed gives the same tokens; the default generator (None) is CUDA graphs' own and is used as it is."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.generator: torch.Generator | None = None
        self.run: torch.Generator | None = None

    def for_run(self, run: torch.Generator | None) -> torch.Generator | None:
        if run is None:
            return None
        if self.generator is None:
            self.generator = torch.Generator(device=self.device)
        if run is not self.run:
            self.generator.manual_seed((run.initial_seed() ^ VERIFY_STREAM) % 2**63)
            self.run = run
        return self.generator
