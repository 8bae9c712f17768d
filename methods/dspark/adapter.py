"""`dspark`: the block drafted slot by slot through the Markov head, then cut to the planned verify length.

The backbone's one forward is DFlash's (``methods.dflash.adapter``). The slots are then drafted in order: slot k's
logits plus the Markov bias of the token drafted before it, argmax (greedy) or a draw from the warped distribution
(which the verifier gets as q). The confidence head's calibrated c_k give the prefix survival a_j = c_1 ... c_j;
the planner (DSpark's Algorithm 1 at batch 1) grows the verify length l while (1 + a_1 + ... + a_l) / latency(1 + l)
rises and stops at the first fall (``threshold`` also stops it at a survival below it). Choosing l reads the
block's confidences on the host: one read per step beyond the verifier's.

Under CUDA graphs the forward runs as DFlash's graphed block (``methods.dflash.graphed``) with the slots and their
survival drafted inside it (``step_outputs``; at T > 0 drawn from the graph's generator, ``StepContext.graph_generator``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from harness.backend.models import LoadedModel
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.method_spec import BuildInputs
from harness.errors import DraftcountError
from harness.trees.tree import TokenTree
from harness.verify.sampling import logits_to_probs, sample_from_probs
from methods.dflash import DFlashOptions
from methods.dflash.adapter import DFlashAdapter
from methods.dspark import DSparkOptions
from methods.dspark.model import DSparkDrafter
from methods.dspark.checkpoint import load_dspark


def read_latency_table(path: str) -> dict[int, float]:
    """{verified tokens: seconds} of the target from ``tree/latency.json`` (``python -m harness``'s latency
    measurement); one line when the file is missing or holds none."""
    try:
        table = json.loads(Path(path).read_text())["target"]
        return {int(size): float(seconds) for size, seconds in table.items()}
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise DraftcountError(f"dspark latency_file {path}: not a latency measurement ({error})") from None


def latency_at(table: dict[int, float], tokens: int) -> float:
    """The target's seconds for a forward of ``tokens`` (interpolated linearly between measured sizes)."""
    sizes = sorted(table)
    return float(np.interp(tokens, sizes, [table[size] for size in sizes]))


def plan_length(survival: list[float], cost: list[float], threshold: float) -> int:
    """DSpark's planner at batch 1: the verify length l (drafts kept) from the prefix survivals a_1..a_n and the
    cost of verifying 1 + l tokens (``cost[l]``, l = 0..n): grow l while expected tokens per second rises,
    stopping at the first fall or at a survival below ``threshold``."""
    best, expected, length = 1.0 / cost[0], 1.0, 0
    for index, alive in enumerate(survival, start=1):
        if alive < threshold:
            break
        expected += alive
        rate = expected / cost[index]
        if rate <= best:
            break
        best, length = rate, index
    return length


class DSparkAdapter(DFlashAdapter):
    """The `dspark` adapter (see the module docstring)."""

    # one request at a time: its parent's batch rows would serve it (its greedy batch check passes), but every
    # batched method adds a sampling check of batch rows to the suite, which has no time left for it
    batch_row = AdapterBase.batch_row

    def __init__(self, drafter: DSparkDrafter, target: LoadedModel, options: DSparkOptions) -> None:
        super().__init__(drafter, target, DFlashOptions(block_size=options.block_size))
        self.threshold = options.threshold
        table = read_latency_table(options.latency_file) if options.latency_file else None
        self.costs = [latency_at(table, 1 + length) if table else 1.0 for length in range(self.drafts + 1)]
        self.details = {**self.details, "threshold": options.threshold, "planner": "latency" if table else "flat"}

    def outputs_kind(self, ctx: StepContext) -> str:
        """What ``step_outputs`` returns: greedy, the drafted chain and its survival (``slots``); sampling, the
        drawn chain, its q's and its survival (``sampled``)."""
        return "slots" if ctx.sampling.is_greedy else "sampled"

    def step_outputs(self, ctx: StepContext, root: torch.Tensor, hidden: torch.Tensor,
                     generator: torch.Generator | None) -> tuple[torch.Tensor, ...]:
        """The backbone's logits on every slot, then the slots drafted in order on the device (sampling: drawn from
        ``generator``): the chain [root, drafts], (sampling) the drafts' q's, and the prefix survival a_1..a_n (no
        host read: the body of a graphed block)."""
        base = self.drafter.logits(hidden, self.lm_head)
        chain, probs, survival = self.draft_slots(ctx, root, hidden, base, generator)
        return (chain, survival) if ctx.sampling.is_greedy else (chain, torch.stack(probs), survival)

    def draft_slots(self, ctx: StepContext, root: torch.Tensor, hidden: torch.Tensor, base: torch.Tensor,
                    generator: torch.Generator | None) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
        """The slots drafted in order through the Markov head: (the chain [root, drafts], each draft's q over the
        target's vocabulary when sampling, the prefix survival a_1..a_n)."""
        tokens, probs, raw = [], [], []
        previous = root.to(self.device)
        for slot in range(self.drafts):
            logits, confidence = self.drafter.slot(hidden[slot], base[slot], previous)
            if ctx.sampling.is_greedy:
                previous = self.vocab.to_target(logits.argmax(-1))
            else:
                warped = logits_to_probs(logits, ctx.sampling)  # over the draft vocabulary; the verifier's q
                probs.append(self.vocab.target_probs(warped))  # over the target's (zero outside it)
                previous = self.vocab.to_target(sample_from_probs(warped, generator))
            tokens.append(previous)
            raw.append(confidence)
        survival = torch.cumprod(self.drafter.confidence(torch.stack(raw), slice(0, self.drafts)), 0)
        return torch.cat([root.reshape(1), torch.stack(tokens).to(root.device)]), probs, survival

    def tree_of(self, ctx: StepContext, root: torch.Tensor, outputs: tuple[torch.Tensor, ...]) -> TokenTree:
        """The chain cut to the planned verify length (sampling: with its drafts' q's)."""
        if ctx.sampling.is_greedy:
            (chain, survival), probs = outputs, None
        else:
            chain, probs, survival = outputs
        length = plan_length(survival.tolist(), self.costs, self.threshold)  # the planner's host read
        return TokenTree(chain[:1 + length], tuple(range(-1, length)),
                         [None, *probs[:length].unbind(0)] if probs is not None else [])


def build(options: DSparkOptions, inputs: BuildInputs) -> DSparkAdapter:
    target = inputs.target
    return DSparkAdapter(load_dspark(inputs.drafter_dir, target.model), target, options)
