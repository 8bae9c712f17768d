"""PARD's adapter: one drafter forward over the unseen accepted tokens and ``k - 1`` masks drafts a chain of k."""

from __future__ import annotations

import torch

from harness.backend.forward import LMOutput, positions, run_model
from harness.backend.kv_cache import crop_cache, new_cache
from harness.backend.models import LoadedModel, load_like_target
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.counters import DrafterWork, count_useful_drafter_flops
from harness.engine.drafting import chain_choices, charge_masks
from harness.engine.method_spec import BuildInputs
from harness.errors import DraftcountError
from harness.trees.tree import TokenTree
from harness.verify.verdict import Verdict
from methods.pard import PardOptions
from methods.pard.graphed import graphed_chain, graphs_draft

def mask_token_of(drafter: LoadedModel, target_vocab: int) -> int:
    """The drafter's mask token (its config's ``pard_token``), checked to lie outside the target's vocabulary or on
    a token the target has (a released PARD model reuses a reserved token); one line when there is none."""
    token = getattr(drafter.config, "pard_token", None)
    if token is None:
        raise DraftcountError(f"pard: the drafter {drafter.source} has no `pard_token` in its config.json (train one "
                              "with `python -m harness train --method pard`, or give a released PARD model)")
    if not 0 <= int(token) < drafter.vocab_size:
        raise DraftcountError(f"pard: the drafter's pard_token {token} is outside its vocabulary of "
                              f"{drafter.vocab_size}")
    if drafter.vocab_size < target_vocab:
        raise DraftcountError(f"pard: the drafter's vocabulary ({drafter.vocab_size}) is smaller than the target's "
                              f"({target_vocab})")
    return int(token)


class PardAdapter(AdapterBase):
    """k drafts from one forward of a mask-token drafter (see the package docstring)."""

    wants_target_hidden_states = False

    def __init__(self, drafter: LoadedModel, k: int, mask_token: int, drafts: str = "sampled") -> None:
        self.drafter = drafter
        self.k = k
        self.drafts = drafts  # at T > 0: sampled drafts carrying q, or the argmax with q = 1 (``parallel_chain``)
        self.mask_token = mask_token
        self.max_draft_nodes = k
        self.details = {"k": k, "pard_token": mask_token, "drafter_parameters": drafter.num_parameters}
        self.cache = new_cache(drafter.config)
        self.graphs = None
        self.cached_len = 0
        self.work = DrafterWork()

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self.cache = ctx.drafter_cache(self, self.drafter.config, self.k, self.drafter.dtype, self.drafter.device)
        self.graphs = ctx.drafter_graphs(self, self.drafter.config, self.drafter.device, self.drafter.dtype)
        self.cached_len = 0

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        device = self.drafter.device
        unseen = sequence[:, self.cached_len:].to(device)
        width = unseen.shape[-1] + self.k - 1  # the text, then k - 1 masks
        if graphs_draft(self, unseen.shape[-1]):
            tokens, probs, flops = graphed_chain(self, ctx, unseen[0])
        else:
            masks = torch.full((1, self.k - 1), self.mask_token, dtype=unseen.dtype, device=device)
            ids = torch.cat([unseen, masks], dim=-1)
            out = run_model(self.drafter, ids, self.cache, positions(self.cached_len, width, device),
                            ctx.counters.drafter, logits_to_keep=self.k, graphs=self.graphs)
            listed, probs = chain_choices(sequence[0, -1], out.logits[0], ctx, self.drafts)
            tokens, flops = torch.stack(listed), out.flops
        per_token = flops / width
        count_useful_drafter_flops(ctx.counters, per_token * (unseen.shape[-1] - 1))  # the accepted text's KV: kept
        self.work.charge([1], per_token)  # the last text token's output is draft 1: useful iff it is accepted
        charge_masks(self.work, self.k, per_token)
        self.cached_len = sequence.shape[-1]
        crop_cache(self.cache, self.cached_len)  # the masks' keys go: the cache holds accepted text only
        return TokenTree(tokens, tuple(range(-1, self.k)), probs)

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        self.work.settle(ctx.counters, verdict.path[1:])  # accepted drafts reach the cache as unseen text next step


def build(options: PardOptions, inputs: BuildInputs) -> PardAdapter:
    assert inputs.drafter_dir is not None  # build_adapter checked the catalog's needs
    drafter = load_like_target(str(inputs.drafter_dir), inputs.target, "pard's drafter")
    return PardAdapter(drafter, options.as_run().k, mask_token_of(drafter, inputs.target.vocab_size), options.drafts)
