"""A drafter's draft vocabulary: the target tokens it predicts over, all of them or the N most frequent in its
training data (EAGLE-3's reduced draft vocabulary, Lyanna's vocabulary compression).

At a 49,152-token vocabulary and width 576 the LM head is about 28M multiply-adds per drafted position; over N
tokens it is N x 576. A drafter with a draft vocabulary computes its logits over those N tokens only: through the
target's LM head rows of those tokens (gathered once, ``DraftVocab.logits``) or through its own N-row head. Draft
index d stands for the target token ``d + d2t[d]`` and ``t2d`` marks the kept target tokens (EAGLE-3's ``d2t``/
``t2d``, which a drafter directory stores as weights of those names: ``harness.training.drafters``). Trees, the
verifier and sampling see target ids: a beam maps its top-k's draft ids (``token_map``), a sampled draft carries its
distribution scattered over the target's vocabulary (zero outside the draft vocabulary, which speculative
sampling's residual then pays back exactly), and a training loss reads the target's distribution restricted to the
draft vocabulary (``restrict``; its optimum is the target's distribution renormalised there). Tokens outside are
never drafted: verification stays lossless.

The choice (``frequent_tokens``): the end-of-sequence tokens the target emits, then the most frequent tokens of the
training stream (ties to the lower id), sorted by id: deterministic for a stream.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from harness.backend.models import LoadedModel, eos_token_ids
from harness.errors import DraftcountError
from harness.training.features import FeatureSource

MAP_WEIGHTS = ("d2t", "t2d")  # a drafter directory's names for the map (EAGLE-3's)


class DraftVocab(nn.Module):
    """Which target tokens a drafter predicts over: every one (``ids`` None; every operation is the identity) or the
    sorted target ids ``ids``. Its buffers are not part of a module's state dict: a drafter directory stores the
    map as ``d2t``/``t2d`` (``maps``), read back by ``vocab_from_maps``."""

    def __init__(self, target_vocab: int, ids: torch.Tensor | None = None) -> None:
        super().__init__()
        self.target_vocab = int(target_vocab)
        if ids is not None:
            ids = ids.long().flatten().cpu()
            if ids.numel() == 0 or bool((ids[1:] <= ids[:-1]).any()) or ids[0] < 0 or ids[-1] >= self.target_vocab:
                raise DraftcountError(f"a draft vocabulary needs sorted distinct target ids in 0..{target_vocab - 1}")
        self.register_buffer("ids", ids, persistent=False)
        self._rows: tuple | None = None  # (key, rows, bias): the target LM head's rows, gathered once

    @property
    def reduced(self) -> bool:
        return self.ids is not None

    @property
    def size(self) -> int:
        """N: the tokens a drafter predicts over."""
        return int(self.ids.shape[0]) if self.ids is not None else self.target_vocab

    @property
    def token_map(self) -> torch.Tensor | None:
        """Draft index -> target id, for a beam's top-k (None: the identity)."""
        return self.ids

    def logits(self, hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """Logits (..., N) of ``hidden`` through the target's ``lm_head``: its rows of the draft vocabulary (``rows``),
        or the whole head."""
        if self.ids is None:
            return lm_head(hidden)
        rows, bias = self.rows(lm_head.weight, getattr(lm_head, "bias", None))
        return F.linear(hidden, rows, bias)

    def rows(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``weight``'s (and ``bias``'s) rows of the draft vocabulary: gathered on every call while gradients flow
        into ``weight``, else once (again when it changes)."""
        ids = self.ids.to(weight.device)
        if weight.requires_grad and torch.is_grad_enabled():
            return weight.index_select(0, ids), None if bias is None else bias.index_select(0, ids)
        key = (weight.data_ptr(), weight._version, weight.device, weight.dtype, None if bias is None else bias._version)
        stale = self._rows is None or self._rows[0] != key
        if stale or self._rows[1].is_inference() and not torch.is_inference_mode_enabled():  # (autograd refuses those)
            self._rows = (key, weight.detach().index_select(0, ids),
                          None if bias is None else bias.detach().index_select(0, ids))
        return self._rows[1], self._rows[2]

    def restrict(self, values: torch.Tensor) -> torch.Tensor:
        """Target-vocabulary ``values`` (..., V) at the draft vocabulary's tokens (..., N)."""
        return values if self.ids is None else values.index_select(-1, self.ids.to(values.device))

    @torch.no_grad()
    def next_token_probs(self, lm_head: nn.Module, features: torch.Tensor) -> torch.Tensor:
        """The target's next-token distribution softmax(lm_head(features)) (float32, over the whole vocabulary),
        restricted to the draft vocabulary: what a drafter's token loss trains against, without gradients. A loss
        whose steps read overlapping spans of the features computes it once over their union and slices it."""
        return self.restrict(torch.softmax(lm_head(features).float(), dim=-1))

    def to_target(self, index: torch.Tensor) -> torch.Tensor:
        """Draft indices -> target ids."""
        return index if self.ids is None else self.ids.to(index.device)[index]

    def scatter(self, values: torch.Tensor, fill: float) -> torch.Tensor:
        """Draft-vocabulary ``values`` (..., N) over the target's vocabulary (..., V), ``fill`` elsewhere."""
        if self.ids is None:
            return values
        full = values.new_full((*values.shape[:-1], self.target_vocab), fill)
        return full.index_copy(-1, self.ids.to(values.device), values)

    def target_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits over the target's vocabulary (-inf outside the draft vocabulary)."""
        return self.scatter(logits, float("-inf"))

    def target_probs(self, probs: torch.Tensor) -> torch.Tensor:
        """A draft distribution over the target's vocabulary (zero outside the draft vocabulary)."""
        return self.scatter(probs, 0.0)

    def head_params(self, full_params: int) -> int:
        """The parameters an LM head of ``full_params`` (target vocabulary x width) has over the draft vocabulary."""
        return full_params * self.size // self.target_vocab

    def maps(self) -> dict[str, torch.Tensor]:
        """EAGLE-3's ``d2t`` (N,) and ``t2d`` (V,) (the identity maps for the full vocabulary)."""
        ids = self.ids.cpu() if self.ids is not None else torch.arange(self.target_vocab)  # host: maps saved to disk
        t2d = torch.zeros(self.target_vocab, dtype=torch.bool)  # host: a map saved to disk
        t2d[ids] = True
        return {"d2t": ids - torch.arange(ids.shape[0]), "t2d": t2d}  # host: a map saved to disk

    def coverage(self, tokens: torch.Tensor) -> float:
        """The share of ``tokens`` (target ids) inside the draft vocabulary."""
        if self.ids is None:
            return 1.0
        return float(torch.isin(tokens.flatten().long(), self.ids.cpu()).float().mean())

    def describe(self) -> dict[str, int]:
        """What a drafter's metadata and an adapter's details record: N and the target's vocabulary."""
        return {"draft_vocab": self.size, "target_vocab": self.target_vocab}


def vocab_from_maps(maps: dict[str, torch.Tensor], target_vocab: int, label: str) -> DraftVocab:
    """The draft vocabulary ``maps`` (``d2t``/``t2d`` read from a drafter directory; none: the full vocabulary; the
    identity maps: the full vocabulary too), checked against the target's vocabulary: one line when they do not
    fit it or disagree."""
    if not maps:
        return DraftVocab(target_vocab)
    if set(maps) != set(MAP_WEIGHTS):
        raise DraftcountError(f"{label}: its draft-vocabulary map needs both d2t and t2d, it has {sorted(maps)}")
    d2t, t2d = maps["d2t"].long().flatten(), maps["t2d"].bool().flatten()
    if t2d.shape[0] != target_vocab:
        raise DraftcountError(f"{label}: its draft vocabulary maps a {t2d.shape[0]}-token vocabulary; the target has "
                              f"{target_vocab}")
    if d2t.shape[0] == target_vocab and not bool(d2t.any()):
        return DraftVocab(target_vocab)  # the identity (a full-vocabulary EAGLE-3 head)
    ids = torch.arange(d2t.shape[0]) + d2t  # host: read from disk; the module's buffers move with it
    if not torch.equal(ids, t2d.nonzero().flatten()):
        raise DraftcountError(f"{label}: its draft-vocabulary maps disagree (d2t and t2d name different target "
                              "tokens)")
    return DraftVocab(target_vocab, ids)


def frequent_tokens(tokens: torch.Tensor, target_vocab: int, size: int, specials: Iterable[int] = ()) -> torch.Tensor:
    """The draft vocabulary of ``size`` tokens for a drafter trained on ``tokens``: ``specials`` first, then the most
    frequent other tokens (equal counts: the lower id first), sorted by id."""
    specials = sorted(set(int(token) for token in specials))
    if not 0 < size <= target_vocab:
        raise DraftcountError(f"draft_vocab must be in 1..{target_vocab} (the target's vocabulary), got {size}")
    if any(not 0 <= token < target_vocab for token in specials) or len(specials) > size:
        raise DraftcountError(f"a draft vocabulary of {size} tokens cannot hold the target's special tokens {specials}")
    stream = tokens.flatten().long()
    if stream.numel() and (int(stream.min()) < 0 or int(stream.max()) >= target_vocab):
        raise DraftcountError(f"the training tokens lie outside the target's vocabulary (0..{target_vocab - 1})")
    priority = torch.bincount(stream, minlength=target_vocab).double()
    priority[specials] = float("inf")
    ranked = torch.sort(priority, descending=True, stable=True).indices
    return ranked[:size].sort().values


def training_tokens(source: FeatureSource) -> torch.Tensor:
    """The tokens a drafter trains on: its token stream, or every window of its feature dump."""
    if source.tokens is not None:
        return source.tokens.flatten()
    return torch.cat([shard["input_ids"].flatten() for shard in source.shards])


def choose_draft_vocab(size: int, source: FeatureSource, target: LoadedModel) -> DraftVocab:
    """The draft vocabulary a ``draft_vocab: size`` option asks for (0: the full vocabulary), chosen from the
    training data of ``source`` with the end-of-sequence tokens ``target`` emits."""
    vocab = target.vocab_size
    if not size:
        return DraftVocab(vocab)
    specials = eos_token_ids(target.model.config, getattr(target.model, "generation_config", None))
    return DraftVocab(vocab, frequent_tokens(training_tokens(source), vocab, size, specials))


def check_init_vocab(size: int, vocab: DraftVocab, init: str) -> None:
    """A trained drafter fine-tuned from ``init`` keeps its draft vocabulary: a ``draft_vocab`` option must be 0 or
    its size (one line otherwise)."""
    if size and size != vocab.size:
        raise DraftcountError(f"init drafter {init} predicts over {vocab.size} tokens; draft_vocab={size} cannot "
                              "change that (leave it out)")


def sized_vocab(target_vocab: int, size: int) -> DraftVocab:
    """A draft vocabulary of ``size`` tokens for timing a drafter step (its lowest ids: which tokens they are plays
    no part in a step's cost); 0: the full vocabulary."""
    return DraftVocab(target_vocab, torch.arange(size)) if size else DraftVocab(target_vocab)  # host: moved by .to
