"""A hybrid target's forward over a token tree: attention layers under the tree mask, Mamba2 layers along the tree's
paths (``harness.hybrid.ssm_tree``), on a ``TreeStateCache``.

``run_model`` (``harness.backend.forward``) calls ``tree_forward`` for every forward on such a cache, so every
method drives a hybrid target as it drives a transformer: the tree arrives as the usual additive mask, whose visible
keys for each new node must be one chain of earlier nodes ending at itself (its ancestors); a feed without a mask is
a chain. Supported: Bamba's layout (``BambaForCausalLM``: ``model.layers[i].mamba`` or ``.self_attn``, then
``feed_forward``), which a pure Mamba2 LM is too when every layer is a Mamba2 layer (STree's drafter).
"""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from harness.errors import DraftcountError
from harness.hybrid.cache import TreeStateCache
from harness.hybrid.ssm_tree import (
    PendingNodes, path_cumulative, softplus_dt, tree_convolution, tree_scan,
)

TREE_MODEL_TYPES = ("bamba",)  # hybrid model types whose forward this module runs over trees


def runs_trees(config: PretrainedConfig) -> bool:
    """Whether ``tree_forward`` runs models of ``config`` (a hybrid layout it knows)."""
    return getattr(config, "model_type", None) in TREE_MODEL_TYPES


def feed_parents(cache: TreeStateCache, mask: torch.Tensor | None, queries: int) -> list[int]:
    """The parents (pending-node indices, -1: the committed end) of ``queries`` nodes fed after the cache's pending
    ones, read from the full additive ``mask`` (1, 1, queries, keys); None (one token): the last pending node."""
    pending = len(cache.parents)
    if mask is None:
        return [pending + index - 1 for index in range(queries)]
    visible = (mask[0, 0] == 0).cpu()  # a host read of the mask: the tree's shape
    if not bool(visible[:, :cache.committed].all()):
        raise DraftcountError("a tree mask that hides committed positions cannot run on a hybrid target")
    visible = visible[:, cache.committed:]
    parents = list(cache.parents)
    for index in range(queries):
        node = pending + index
        seen = visible[index].nonzero().flatten().tolist()
        parent = seen[-2] if len(seen) > 1 else -1
        chain, at = [], parent
        while at >= 0:
            chain.append(at)
            at = parents[at]
        if not seen or seen[-1] != node or seen[:-1] != chain[::-1]:
            raise DraftcountError(f"node {node} sees positions {seen}: on a hybrid target each node must see exactly "
                                  "its ancestors and itself (a token tree)")
        parents.append(parent)
    return parents[pending:]


def mixer_over_tree(mixer: torch.nn.Module, hidden: torch.Tensor, cache: TreeStateCache, layer: int,
                    parents: tuple[int, ...]) -> torch.Tensor:
    """A Bamba/Mamba2 mixer's output (1, q, d) for the q nodes fed now (the last q of ``parents``, every pending
    node's parent), their activations added to the layer's pending nodes."""
    queries = hidden.shape[1]
    heads, head_dim = mixer.num_heads, mixer.head_dim
    groups, state_size = mixer.n_groups, mixer.ssm_state_size
    gate, raw, dt = mixer.in_proj(hidden[0]).split([mixer.intermediate_size, mixer.conv_dim, heads], dim=-1)
    if layer not in cache.pending:
        device = hidden.device
        cache.windows[layer] = torch.zeros((mixer.conv_dim, mixer.conv_kernel_size), device=device)
        cache.states[layer] = torch.zeros((heads, head_dim, state_size), device=device)
        cache.pending[layer] = PendingNodes.empty(mixer.conv_dim, heads, head_dim, groups, state_size, torch.float32,
                                                  device)
    pending = cache.pending[layer]
    raw = raw.float()
    conv = tree_convolution(cache.windows[layer], torch.cat([pending.raw, raw]), parents, mixer.conv1d.weight[:, 0],
                            mixer.conv1d.bias, queries)
    x, b, c = mixer.act(conv).split([mixer.intermediate_size, groups * state_size, groups * state_size], dim=-1)
    step = softplus_dt(dt.float(), mixer.dt_bias.float(), tuple(mixer.time_step_limit))
    cum = path_cumulative(parents, torch.cat([pending.dt, step]) * -torch.exp(mixer.A_log.float()), queries)
    nodes = pending.extended(PendingNodes(raw, x.reshape(queries, heads, head_dim).float(),
                                          b.reshape(queries, groups, state_size).float(), step, cum))
    y = tree_scan(cache.states[layer], nodes, c.reshape(queries, groups, state_size).float(), mixer.D.float(),
                  parents, queries)
    cache.pending[layer] = nodes
    y = mixer.norm(y.reshape(1, queries, -1).to(hidden.dtype), gate[None])
    return mixer.out_proj(y.to(hidden.dtype))


def tree_forward(model: torch.nn.Module, input_ids: torch.Tensor, cache: TreeStateCache, position_ids: torch.Tensor,
                 mask: torch.Tensor | None, logits_to_keep: int = 0,
                 hidden: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """A Bamba-layout model over ``input_ids`` (1, q) at ``position_ids`` under ``mask`` (the full additive mask
    (1, 1, q, keys); None only for one token): the logits (of the last ``logits_to_keep`` positions; 0: all) and,
    with ``hidden``, the embeddings and every layer's output (the last one after the final norm, as transformers
    returns them)."""
    if input_ids.shape[0] != 1:
        raise DraftcountError(f"a hybrid target's tree forward takes one sequence, not a batch of "
                              f"{input_ids.shape[0]}")
    if mask is None and input_ids.shape[1] > 1:
        raise DraftcountError("a hybrid target's forward over several tokens needs their mask (a chain's or a tree's)")
    base = model.model
    queries = input_ids.shape[1]
    parents = (*cache.parents, *feed_parents(cache, mask, queries))
    states = base.embed_tokens(input_ids)
    rotary = base.rotary_emb(states, position_ids=position_ids)
    collected = [states]
    for index, layer in enumerate(base.layers):
        normed = layer.input_layernorm(states)
        if index in cache.mamba:
            mixed = mixer_over_tree(layer.mamba, normed, cache, index, parents)
        else:
            mixed, _ = layer.self_attn(hidden_states=normed, position_embeddings=rotary, attention_mask=mask,
                                       cache=cache)
        states = states + mixed
        states = states + layer.feed_forward(layer.pre_ff_layernorm(states))
        collected.append(states)
    cache.parents = list(parents)
    states = base.final_layernorm(states)
    collected[-1] = states
    logits = model.lm_head(states[:, -logits_to_keep:] if logits_to_keep > 0 else states)
    return logits, (tuple(collected) if hidden else None)
