"""`ar`: the autoregressive baseline on the same engine (a root-only tree every step)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AutoregressiveOptions:
    """The baseline has no options."""
