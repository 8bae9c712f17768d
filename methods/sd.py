"""`sd`: standard speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

A small draft LM with the target's tokenizer drafts a chain of gamma tokens;
the shared verifier accepts a prefix by rejection sampling (or greedy match).
The draft KV cache is kept in sync: after each step it holds exactly the
accepted tokens it has seen, and the tokens it has not yet seen (the last
accepted draft when all were accepted, the bonus token) are fed at the start
of the next step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.adapter import StepContext
from harness.errors import DraftcountError
from harness.forward import LMOutput, positions, run_model
from harness.kv_cache import crop_cache, new_cache
from harness.models import LoadedModel, check_same_tokenizer
from harness.sampling import align_vocab, logits_to_probs, sample_from_probs
from harness.tree import TokenTree, chain
from harness.verify import Verdict
from methods import BuildInputs, MethodSpec, register


@dataclass(frozen=True)
class SpeculativeDecodingOptions:
    gamma: int = 4

    def __post_init__(self) -> None:
        if self.gamma < 1:
            raise DraftcountError(f"option 'gamma' of method 'sd' must be >= 1, got {self.gamma}")


def draft_token(logits: torch.Tensor, ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Choose a draft token from a drafter's logits (V,): argmax when greedy, else a draw from its warped distribution.

    Returns the token and the distribution it was drawn from (None for greedy).
    """
    logits = align_vocab(logits, ctx.target_vocab_size)
    if ctx.sampling.is_greedy:
        return logits.argmax(dim=-1), None
    probs = logits_to_probs(logits, ctx.sampling)
    return sample_from_probs(probs, ctx.generator), probs


class SpeculativeDecoding:
    wants_target_hidden_states = False

    def __init__(self, draft: LoadedModel, options: SpeculativeDecodingOptions) -> None:
        self.draft = draft
        self.gamma = options.gamma
        self.max_draft_nodes = options.gamma
        self.cache = new_cache(draft.config)
        self.cached_len = 0

    def begin(self, ctx: StepContext, prompt_ids: torch.Tensor, prefill: LMOutput) -> None:
        self.cache = new_cache(self.draft.config)
        self.cached_len = 0

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        unseen = sequence[:, self.cached_len :].to(self.draft.device)
        out = run_model(
            self.draft, unseen, self.cache, positions(self.cached_len, unseen.shape[-1], self.draft.device),
            ctx.counters.drafter, logits_to_keep=1,
        )
        drafts, draft_probs = [], []
        for step in range(self.gamma):
            token, probs = draft_token(out.logits[0, -1], ctx)
            drafts.append(token)
            draft_probs.append(probs)
            if step + 1 < self.gamma:
                out = run_model(
                    self.draft, token.reshape(1, 1), self.cache,
                    positions(sequence.shape[-1] + step, 1, self.draft.device), ctx.counters.drafter,
                )
        self.cached_len = sequence.shape[-1] + self.gamma - 1
        root = sequence[0, -1]
        return chain(root, [token.to(root.device) for token in drafts], draft_probs)

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        # The cache holds the prefix, the root and drafts 1..gamma-1; keep those that were accepted.
        root_position = self.cached_len - self.gamma
        self.cached_len = root_position + 1 + min(verdict.num_accepted, self.gamma - 1)
        crop_cache(self.cache, self.cached_len)


def _build(options: SpeculativeDecodingOptions, inputs: BuildInputs) -> SpeculativeDecoding:
    assert inputs.draft is not None
    check_same_tokenizer(inputs.target, inputs.draft)
    return SpeculativeDecoding(inputs.draft, options)


SPEC = register(
    MethodSpec(
        name="sd",
        summary="speculative decoding: a draft LM proposes a chain of gamma tokens",
        options_type=SpeculativeDecodingOptions,
        build=_build,
        needs_draft=True,
    )
)
