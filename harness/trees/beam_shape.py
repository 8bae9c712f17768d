"""A beam-grown tree's shape (``BeamShape``) and the options every beam drafter extends (``BeamOptions``).

Torch-free, so that a method's options module can import it and the workflow can parse every variant's options at
plan time. ``BeamOptions.shape()`` is where a measured shape file (``python -m harness measure tree-shape``) turns
into the depth and budget a run uses: once, when the adapter is built; the options themselves never change.
"""

from __future__ import annotations

import dataclasses

import json
from dataclasses import dataclass
from pathlib import Path

from typing import Literal

from harness.catalog import method_names, options_type
from harness.errors import DraftcountError

DRAFTS = ("topk", "sampled")  # the drafting conventions at T > 0 (harness.trees.beam); at T = 0 both are greedy
DEFAULT_DRAFTS = "topk"  # a beam drafter's convention unless its options or a shape file choose (EAGLE's)


@dataclass(frozen=True)
class BeamShape:
    top_k: int = 4
    depth: int = 5
    budget: int = 24
    drafts: str = DEFAULT_DRAFTS  # at T > 0: top-k children with q = 1, or sampled ones carrying their q

    def __post_init__(self) -> None:
        if self.top_k < 1 or self.depth < 1 or self.budget < 1:
            raise DraftcountError(
                f"beam tree needs top_k, depth and budget >= 1, got {self.top_k}, {self.depth}, {self.budget}"
            )
        if self.drafts not in DRAFTS:
            raise DraftcountError(f"beam tree drafts must be one of {list(DRAFTS)}, got {self.drafts!r}")

    @property
    def pool_size(self) -> int:
        return self.top_k + (self.depth - 1) * self.top_k * self.top_k

    @property
    def max_nodes(self) -> int:
        return min(self.budget, self.pool_size)


def shape_from_file(path: str, top_k: int) -> tuple[int, int, str]:
    """The depth, budget and drafting convention a tree-shape file chose (``python -m harness measure tree-shape``:
    the shape of highest estimated tokens/s on the machine it was measured on) for a beam of ``top_k``; a file
    written before the convention was calibrated chose top-k."""
    try:
        shape = json.loads(Path(path).read_text())
        depth, budget, measured_k = int(shape["depth"]), int(shape["budget"]), int(shape["top_k"])
        drafts = str(shape.get("drafts", DEFAULT_DRAFTS))
    except FileNotFoundError:
        raise DraftcountError(f"no tree-shape file {path} (python -m harness measure tree-shape writes one)") from None
    except (ValueError, KeyError, TypeError) as error:
        raise DraftcountError(f"{path} is not a tree-shape file: {error!r}") from None
    if measured_k != top_k:
        raise DraftcountError(f"{path} was measured with top_k={measured_k}, not {top_k}")
    if drafts not in DRAFTS:
        raise DraftcountError(f"{path} chose drafts {drafts!r}, not one of {list(DRAFTS)}")
    return depth, budget, drafts


@dataclass(frozen=True)
class BeamOptions:
    """The tree options of every beam drafter (eagle, lyanna, prism, owl): a method's options extend this class,
    and the workflow's ``budget: auto`` (a measured ``shape_file`` in place of depth and budget) serves them all."""

    top_k: int = 4  # children per expanded node, and nodes expanded per depth
    depth: int = 5
    budget: int = 24  # draft nodes verified per step (root excluded)
    shape_file: str = ""  # a measured tree shape (measure tree-shape): its depth and budget replace the above
    # at T > 0: topk (deterministic top-k children, q = 1: EAGLE's convention) or sampled (children drawn without
    # replacement, carrying their q); auto: the shape file's choice (the calibration's, per temperature), else topk
    drafts: Literal["auto", "topk", "sampled"] = "auto"

    def __post_init__(self) -> None:
        if self.shape_file:  # depth and budget come from the file, read when the adapter is built
            BeamShape(self.top_k, 1, 1)
        else:
            self.shape()

    def shape(self) -> BeamShape:
        """The tree shape a run uses: the shape file's depth and budget when one is given, else the options'."""
        if self.shape_file:
            depth, budget, drafts = shape_from_file(self.shape_file, self.top_k)
            return BeamShape(self.top_k, depth, budget, drafts if self.drafts == "auto" else self.drafts)
        return BeamShape(self.top_k, self.depth, self.budget, DEFAULT_DRAFTS if self.drafts == "auto" else self.drafts)

    def as_run(self) -> BeamOptions:
        """These options with the depth, budget and drafting convention a run uses (a shape file's in place of the
        defaults), so that a record and the summary's options column show what ran."""
        shape = self.shape()
        return dataclasses.replace(self, depth=shape.depth, budget=shape.budget, drafts=shape.drafts)


SHAPE_FIELDS = ("depth", "budget")  # what a shape file replaces (the workflow drops them for `budget: auto`)


def beam_methods() -> list[str]:
    """The catalog's beam drafters: the methods whose options extend ``BeamOptions`` (what `budget: auto`, rule
    tree_shape and ``measure tree-shape`` serve)."""
    return [name for name in method_names() if issubclass(options_type(name), BeamOptions)]
