"""Whether two drafters of a claims row are of equal size: "equal parameters" only where their trainable parameter
counts, as the run's records have them (``method_details.drafter_parameters``: the count the training metrics
record), differ by at most ``EQUAL_PARAMETERS``. Torch-free, as every view."""

from __future__ import annotations

import json

import pandas as pd

EQUAL_PARAMETERS = 0.02  # the largest relative difference still called "equal parameters"


def drafter_parameters(turns: pd.DataFrame, variant: str) -> int | None:
    """The trainable parameters of ``variant``'s drafter in its records' details; None where they do not say."""
    mine = turns[turns.variant == variant]
    if mine.empty or "details" not in mine:
        return None
    count = json.loads(mine.details.iloc[0] or "{}").get("drafter_parameters")
    return int(count) if count else None


def parameter_difference(mine: int, theirs: int) -> float:
    """``mine`` over ``theirs`` less one: +0.17 where ``mine`` has 17% more parameters."""
    return mine / theirs - 1


def parameter_note(turns: pd.DataFrame, variant: str, against: str) -> str:
    """The note a claims row comparing two drafters carries: "equal parameters" where the counts differ by at most
    ``EQUAL_PARAMETERS``, else "parameters differ", with both counts and the difference."""
    mine, theirs = drafter_parameters(turns, variant), drafter_parameters(turns, against)
    if mine is None or theirs is None:
        return "drafter parameters not recorded"
    difference = parameter_difference(mine, theirs)
    label = "equal parameters" if abs(mine - theirs) <= EQUAL_PARAMETERS * theirs else "parameters differ"
    return f"{label}: {variant} {mine:,}, {against} {theirs:,} ({100 * difference:+.1f}%)"
