"""`eagle`: an EAGLE head drafting EAGLE-2 dynamic trees, verified by the shared verifier.

Each round the head first catches up on the accepted tokens, fed with the
target's true features (one forward over the pairs (f_p, x_{p+1}) it has not
seen); its last output gives the root's children. The tree then grows
beam-style (``harness.beam_tree``): the k best frontier nodes of a depth are
fed together, each with the predicted feature that produced it and with a tree
mask over the head's KV cache, and the budget's best nodes by cumulative
log-probability are verified. The head's cache keeps only the true-feature
prefix: entries of tree nodes (built on predicted features) are dropped after
verification, and the accepted tokens are re-fed with the target's features
next round, as EAGLE does.

Drafter FLOPs count as useful for the catch-up forward and for a tree node
whose children included an accepted token.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import DynamicCache

from harness.adapter import StepContext
from harness.beam_tree import BeamPool, BeamShape, BeamTree, grow_beam_tree
from harness.counters import DrafterWork, count_useful_drafter_flops
from harness.forward import LMOutput, positions
from harness.kv_cache import crop_cache
from harness.models import LoadedModel, ModelCost
from harness.tree import TokenTree, tree_attention_bias
from harness.verify import Verdict
from methods import BuildInputs, MethodSpec, register
from methods.eagle_head import EagleHead, feature_rows, load_head
from methods.eagle_training import train_eagle


@dataclass(frozen=True)
class EagleOptions:
    top_k: int = 4  # children per expanded node, and nodes expanded per depth
    depth: int = 5
    budget: int = 24  # draft nodes verified per step (root excluded)

    def __post_init__(self) -> None:
        BeamShape(self.top_k, self.depth, self.budget)


def causal_chunk_bias(past: int, count: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """Mask for ``count`` consecutive new positions after ``past`` cached ones (None for a single query)."""
    if count == 1:
        return None
    bias = torch.zeros(count, past + count, dtype=dtype)
    bias[:, past:] = torch.full((count, count), torch.finfo(dtype).min, dtype=dtype).triu(1)
    return bias.to(device)[None, None]


class HeadRunner:
    """The head on the target's device and dtype, its FLOP cost, and the target's LM head for its logits."""

    def __init__(self, module: torch.nn.Module, target: LoadedModel, cost: ModelCost) -> None:
        self.module = module.to(target.device, target.dtype).eval()
        self.lm_head = target.model.get_output_embeddings()
        self.cost = cost
        self.device = target.device
        self.dtype = target.dtype

    def logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.lm_head(hidden).float(), dim=-1)


class EagleDrafter:
    """The `eagle` adapter (see the module docstring)."""

    wants_target_hidden_states = True

    def __init__(self, head: EagleHead, target: LoadedModel, shape: BeamShape) -> None:
        self.runner = HeadRunner(head, target, head.cost(target.model.get_output_embeddings().weight.numel()))
        self.head = self.runner.module
        self.shape = shape
        self.max_draft_nodes = shape.max_nodes
        self.details = {"top_k": shape.top_k, "depth": shape.depth, "budget": shape.budget,
                        "fusion": head.features.fusion, "feature_layers": list(head.features.layers),
                        "drafter_parameters": head.trainable_parameters()}
        self.work = DrafterWork()
        self._reset()

    def _reset(self) -> None:
        self.cache = DynamicCache(config=self.head.config)
        self.pending = torch.empty(0)  # true features of positions fed_len.. not yet fed
        self.fed_len = 0
        self.beam: BeamTree | None = None

    def _features(self, hidden_states: tuple[torch.Tensor, ...], index: torch.Tensor | slice) -> torch.Tensor:
        rows = [state[0, index] for state in feature_rows(hidden_states, self.head.features)]
        return self.head.input_features(rows)

    def _forward(self, ctx: StepContext, features: torch.Tensor, tokens: torch.Tensor, position_ids: torch.Tensor,
                 bias: torch.Tensor | None, logits_rows: int) -> tuple[torch.Tensor, float]:
        past = self.cache.get_seq_length()
        hidden = self.head(features[None], tokens[None].to(self.runner.device), position_ids, self.cache, bias)[0]
        flops = self.runner.cost.forward_flops(tokens.shape[0], past + tokens.shape[0], logits_rows)
        ctx.counters.drafter.add(tokens.shape[0], flops)
        return hidden, flops

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self._reset()
        self.pending = self._features(prefill.hidden_states, slice(None))

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        count = self.pending.shape[0]
        tokens = sequence[0, self.fed_len + 1 : self.fed_len + 1 + count]
        hidden, flops = self._forward(
            ctx, self.pending, tokens, positions(self.fed_len, count, self.runner.device),
            causal_chunk_bias(self.fed_len, count, self.runner.dtype, self.runner.device), logits_rows=1,
        )
        count_useful_drafter_flops(ctx.counters, flops)
        self.fed_len += count
        root_hidden = hidden[-1]
        produced_by: dict[int, torch.Tensor] = {}  # pool node -> head output that scored its children
        parents: list[int] = [-1]  # pool parents shifted by one (0 = the root) for tree masks
        fed: list[int] = []

        def expand(depth: int, frontier: list[int], pool: BeamPool) -> torch.Tensor:
            parents.extend(pool.parents[node] + 1 for node in range(len(parents) - 1, len(pool.tokens)))
            inputs = torch.stack([produced_by[pool.parents[node]] if pool.parents[node] >= 0 else root_hidden
                                  for node in frontier])
            node_tokens = torch.tensor([pool.tokens[node] for node in frontier])
            bias = tree_attention_bias(tuple(parents), [node + 1 for node in fed], [node + 1 for node in frontier],
                                       self.fed_len, self.runner.dtype, self.runner.device)
            position_ids = torch.full((1, len(frontier)), self.fed_len + depth - 1, device=self.runner.device)
            out, cost = self._forward(ctx, inputs, node_tokens, position_ids, bias, logits_rows=len(frontier))
            self.work.charge(frontier, cost)
            produced_by.update({node: out[row] for row, node in enumerate(frontier)})
            fed.extend(frontier)
            return self.runner.logprobs(out)

        self.beam = grow_beam_tree(sequence[0, -1], self.runner.logprobs(root_hidden), expand, self.shape)
        return self.beam.tree

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        accepted_pool = [self.beam.pool_of_node[node] for node in verdict.path[1:]]
        self.work.settle(ctx.counters, [self.beam.pool.parents[node] for node in accepted_pool])
        crop_cache(self.cache, self.fed_len)  # drop the tree nodes' entries: they were built on predicted features
        index = torch.tensor(verdict.path, device=target_out.hidden_states[-1].device)
        self.pending = self._features(target_out.hidden_states, index)


def _build(options: EagleOptions, inputs: BuildInputs) -> EagleDrafter:
    target = inputs.target
    embedding = target.model.get_input_embeddings().weight
    head = load_head(Path(inputs.drafter_dir), int(embedding.shape[1]), target.vocab_size, embedding)
    return EagleDrafter(head, target, BeamShape(options.top_k, options.depth, options.budget))


SPEC = register(
    MethodSpec(
        name="eagle",
        summary="EAGLE head (feature + token embedding) drafting EAGLE-2 dynamic trees",
        options_type=EagleOptions,
        build=_build,
        needs_drafter_dir=True,
        train=train_eagle,
    )
)
