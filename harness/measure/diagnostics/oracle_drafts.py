"""The engine-efficiency oracle (``python -m harness measure engine-efficiency``): a method's real drafting every
step, its proposals replaced by the target's own greedy continuation so that a chosen number of drafts is accepted.

``OracleDrafts`` wraps a method's adapter. Its ``propose`` runs the method's drafting as it is (the drafter's
forwards, the tree, every op it dispatches) and then rewrites the tree's tokens on the tree's device, nothing read
on the host: along one path (the root down to the first node at depth ``a``, or at the deepest depth short of it)
the continuation's tokens, at every other node the continuation's token at its depth plus one, which the target does
not choose. Greedy verification then accepts exactly ``a`` drafts a step (fewer only where the tree is shallower),
``a`` following ``accepted_at`` so that a step emits ``tau`` tokens on average. What a step costs stays the
method's; only what it is worth is fixed.

A random target's greedy choices are near ties: the top two logits of a random Llama differ by about a tenth of the
logits' spread (median; some by nothing), so a one-token forward and a tree forward, whose matrix products round
differently in bfloat16, choose differently, and one forward's continuation is not the other's.
``decisive_target`` gives a random target a decisive greedy choice at the same cost: its LM head's rows are its
input embeddings in a random order (the row of ``successor[x]`` is token x's embedding, its direction), and every
block's output projections (attention's ``o_proj``, the MLP's ``down_proj``) are scaled down, so the last hidden
state is nearly the input token's embedding and the next token is its successor by a wide margin. The head's rows
have a large norm (``HEAD_NORM``), so that a drafter that drafts through the target's LM head (EAGLE's head,
Lyanna's, DFlash's) is as sure of its top token as a trained one: a random drafter's logits can be nearly flat (at
1/32 of Llama-3.1-8B's widths its outputs are tiny), and a beam tree of 59 nodes over them stopped at depth 2, short
of what tau 6 needs. Every matrix keeps its shape, so every forward the same kernels and time.
"""

from __future__ import annotations

import math

import torch
from transformers import PreTrainedModel

from harness.backend.device import to_device
from harness.backend.forward import LMOutput
from harness.engine.adapter import AdapterBase, DraftAdapter, RowsDrafting, StepContext
from harness.errors import DraftcountError
from harness.trees.tree import DeferredTree, TokenTree
from harness.verify.verdict import Verdict

RESIDUAL_SCALE = 1e-4  # the blocks' output projections of a decisive target, times this
HEAD_NORM = 1e4  # the norm of every row of its LM head


@torch.no_grad()
def decisive_target(model: PreTrainedModel, seed: int = 0, residual_scale: float = RESIDUAL_SCALE,
                    head_norm: float = HEAD_NORM) -> torch.Tensor:
    """Make ``model`` (a random Llama with an LM head of its own) choose, greedily, the successor of its input token
    by a wide margin (see the module docstring); the successor of every token (a permutation, on its device)."""
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    if head.data_ptr() == embedding.data_ptr():
        raise DraftcountError("a decisive target needs an LM head of its own (tie_word_embeddings=False)")
    device = embedding.device
    successor = torch.randperm(embedding.shape[0], generator=torch.Generator(device=device).manual_seed(seed),
                               device=device)
    head.index_copy_(0, successor, embedding / embedding.norm(dim=-1, keepdim=True) * head_norm)
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.mul_(residual_scale)
        layer.mlp.down_proj.weight.mul_(residual_scale)
    return successor


def accepted_at(step: int, tau: float) -> int:
    """Drafts accepted at decoding step ``step`` (0-based) so that steps emit ``tau`` tokens on average: tau - 1 a
    step, its fraction spread evenly (floor((step + 1)(tau - 1)) - floor(step (tau - 1)))."""
    if tau < 1:
        raise ValueError(f"tau must be >= 1, got {tau}")
    rate = tau - 1
    return math.floor((step + 1) * rate + 1e-9) - math.floor(step * rate + 1e-9)


def oracle_plan(tree: TokenTree, accepted: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per node of ``tree``: its depth, and 1 off the oracle's path (0 on it), on the tree's device. The path runs
    from the root to the first node at depth ``accepted`` (or the deepest depth short of it). A tree whose shape is
    still on the device (``DeferredTree``) is planned there, a host-side shape on the host (one copy)."""
    device = tree.tokens.device
    if not isinstance(tree, DeferredTree):
        depths = tree.depths
        path = set(tree.path_to(depths.index(min(accepted, max(depths)))))
        # host: from the host-side shape, sent in one copy
        plan = torch.tensor([list(depths), [int(node not in path) for node in range(tree.size)]])
        plan = to_device(plan, device)
        return plan[0], plan[1]
    size = tree.tokens.shape[0]
    depths, parents = tree.device_depths, tree.device_parents.clamp(min=0)
    order = torch.arange(size, device=device)
    node = (depths.clamp(max=accepted) * size - order).argmax().reshape(1)  # the first of the deepest depth <= a
    on_path = torch.zeros(size, dtype=torch.bool, device=device)
    for _ in range(accepted):
        on_path.index_fill_(0, node, True)
        node = parents.index_select(0, node)
    return depths, (~on_path).long()


def oracle_tokens(tree: TokenTree, continuation: torch.Tensor, root_position: int, accepted: int,
                  vocab_size: int) -> torch.Tensor:
    """``tree``'s tokens rewritten: the root kept, a node at depth d on the oracle's path (``oracle_plan``) the
    continuation's token at ``root_position + d``, any other node that token + 1 (mod ``vocab_size``)."""
    depths, off_path = oracle_plan(tree, accepted)
    index = (depths + root_position).clamp(max=continuation.shape[0] - 1)
    tokens = (continuation.index_select(0, index) + off_path).remainder(vocab_size)
    return torch.cat([tree.tokens[:1], tokens[1:]])


class OracleDrafts(AdapterBase):
    """``inner``'s drafting with its proposals rewritten by ``oracle_tokens`` to the token sequence ``continuation``
    (the prompt and the target's greedy continuation, on the target's device), ``accepted_at(step, tau)`` drafts
    accepted at each step."""

    def __init__(self, inner: DraftAdapter, continuation: torch.Tensor, tau: float) -> None:
        accepted_at(0, tau)  # checks tau
        self.inner, self.continuation, self.tau = inner, continuation, tau
        self.wants_target_hidden_states = inner.wants_target_hidden_states
        self.target_hidden_layers = inner.target_hidden_layers
        self.max_draft_nodes = inner.max_draft_nodes
        self.separate_root_forward = inner.separate_root_forward
        self.details = {**inner.details, "oracle_tau": tau}
        self.step = 0

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self.step = 0
        self.inner.begin(ctx, prompt_ids, prefill)

    def observe_root(self, ctx: StepContext, root_out: LMOutput) -> None:
        self.inner.observe_root(ctx, root_out)

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        tree = self.inner.propose(ctx, sequence)
        tree.tokens = oracle_tokens(tree, self.continuation, sequence.shape[-1] - 1, accepted_at(self.step, self.tau),
                                    ctx.target_vocab_size)
        self.step += 1
        return tree

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        self.inner.commit(ctx, tree, verdict, target_out)

    def batch_drafting(self, count: int) -> RowsDrafting | None:
        return None
