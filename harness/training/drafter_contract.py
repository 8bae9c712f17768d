"""The drafter kit's contract with a family's drafter (docs/extending.md, *The drafter kit's contract*): the
methods the kit calls on the module it trains (``Drafter``, held to before the first step by ``check_drafter``) and
the metrics every family records: its held-out top-1 agreement per draft step (``AGREEMENT``, ``checked_agreement``)
and its trainable parameters by component (``parameter_components``: the models table's column)."""

from __future__ import annotations

from typing import Protocol

from torch import nn

from harness.errors import DraftcountError


class Drafter(Protocol):
    """What the drafter kit calls on a drafter module beyond ``torch.nn.Module``'s own (``parameters``, ``train``,
    ``eval``, ``state_dict``/``load_state_dict`` for checkpoints, ``cpu`` before ``save``). Optional: an attribute
    ``draft_vocab`` (a ``harness.training.draft_vocab.DraftVocab``), read when present, whose size the metrics
    record. ``DRAFTER_METHODS`` lists the methods; ``check_drafter`` holds a drafter to them before training."""

    def trainable_parameters(self) -> int:
        """Its trained parameters' count: the metrics' ``trainable_parameters``."""


DRAFTER_METHODS = ("trainable_parameters",)  # the methods of ``Drafter``: what check_drafter requires


def check_drafter(module: object, method: str) -> None:
    """``module`` is a ``torch.nn.Module`` with every method of ``Drafter``: one line naming its class and what it
    lacks otherwise (``fit_drafter`` checks before the first step, so training stops before it starts)."""
    name = type(module).__name__
    if not isinstance(module, nn.Module):
        raise DraftcountError(f"{method}: the drafter to train is a {name}, not a torch.nn.Module")
    missing = [f"{attribute}()" for attribute in DRAFTER_METHODS if not callable(getattr(module, attribute, None))]
    if missing:
        raise DraftcountError(f"{method}: drafter class {name} lacks {', '.join(missing)}, which the drafter kit calls "
                              f"(harness.training.drafter_contract.Drafter; docs/extending.md, *The drafter kit's contract*)")


COMPONENTS = "parameter_components"  # the metric: trainable parameters by component, adding up to the count
COMPONENT_OF = {  # a drafter's (or LM's) top-level parameter name -> its component; any other: the backbone
    "embed_tokens": "embedding", "embedding": "embedding", "model.embed_tokens": "embedding",
    "parent_embed": "injection", "parent_norm": "injection", "parent_up": "injection", "inject_mlp": "injection",
    "lm_head": "heads", "lm_heads": "heads", "head": "heads", "markov_head": "heads", "confidence_head": "heads",
}


def parameter_components(module: nn.Module) -> dict[str, int]:
    """Trainable parameters by component (``COMPONENT_OF``; a tied weight counted once, under its first name): the
    backbone (layers, input fusion and projections, norms, a block drafter's mask inputs), the token-information
    injection, a trainable token embedding, the output heads. Only the components a drafter has, in that order."""
    counts = dict.fromkeys(("backbone", "injection", "embedding", "heads"), 0)
    for name, parameter in module.named_parameters():
        if parameter.requires_grad:
            parts = name.split(".")
            top = ".".join(parts[:2]) if parts[0] == "model" else parts[0]
            counts[COMPONENT_OF.get(top, "backbone")] += parameter.numel()
    return {component: count for component, count in counts.items() if count}


AGREEMENT = "heldout_top1_agreement_by_step"  # the metric of the module docstring's contract


def checked_agreement(method: str, values: list[float]) -> list[float]:
    """A family's agreement per draft step as the contract has it (floats in [0, 1], at least one); one line if
    not."""
    agreement = [float(value) for value in values]
    if not agreement or not all(0.0 <= value <= 1.0 for value in agreement):
        raise DraftcountError(f"{method}: the held-out agreement per draft step must be one share in [0, 1] per step, "
                              f"got {list(values)}")
    return agreement


AGREEMENT_BY_WINDOW = "heldout_top1_agreement_by_window"  # with DrafterTrainRequest.by_window: per held-out window


def agreement_by_window(method: str, agreement, module: nn.Module, batch: dict) -> list[list[float]]:
    """``agreement(module, batch)`` of each held-out window (row of ``batch``) alone, each checked: what a paired
    comparison of two drafters on the same windows resamples (``python -m harness measure dump-precision``)."""
    rows = int(batch["input_ids"].shape[0])
    return [checked_agreement(method, agreement(module, {key: value[row:row + 1] for key, value in batch.items()}))
            for row in range(rows)]
