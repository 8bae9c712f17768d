"""A chain drafter's length chosen on the machine (``ChainOptions``): what `gamma: auto` (sd), `k: auto` (pard) and
`verify_length: auto` (dflash) turn into.

Torch-free, as ``harness.trees.beam_shape`` is for the beam drafters: a method's options extend ``ChainOptions`` and
name their length field in ``CHAIN_LENGTH``; the workflow replaces the field's `auto` with a ``length_file``
written by ``python -m harness measure chain-length`` (rule chain_length), and ``as_run()`` reads it, once, when the
adapter is built, so that a record and the summary's options column show the length that ran.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from harness.catalog import method_names, options_type
from harness.errors import DraftcountError


def length_from_file(path: str, field: str) -> int:
    """The chain length a chain-length file chose (``python -m harness measure chain-length``) for option
    ``field``: one line if the file is missing, malformed, or was measured for another field."""
    try:
        chosen = json.loads(Path(path).read_text())
        length, measured = int(chosen["length"]), str(chosen["field"])
    except FileNotFoundError:
        raise DraftcountError(f"no chain-length file {path} (python -m harness measure chain-length writes one)"
                              ) from None
    except (ValueError, KeyError, TypeError) as error:
        raise DraftcountError(f"{path} is not a chain-length file: {error!r}") from None
    if measured != field:
        raise DraftcountError(f"{path} chose option {measured!r}, not {field!r}")
    if length < 1:
        raise DraftcountError(f"{path} chose a chain length of {length}")
    return length


@dataclass(frozen=True)
class ChainOptions:
    """What every chain drafter with a tunable length shares: ``length_file``, a measured length that replaces
    the option named by the subclass's ``CHAIN_LENGTH``."""

    CHAIN_LENGTH: ClassVar[str] = ""
    length_file: str = ""  # a measured chain length (measure chain-length): it replaces the CHAIN_LENGTH option
    # at T > 0: sampled (each draft drawn from the drafter's warped distribution, carrying it: SD's convention) or
    # topk (the drafter's argmax, verified as q = 1: EAGLE's); at T = 0 both are greedy (harness.trees.beam)
    drafts: Literal["sampled", "topk"] = "sampled"

    def as_run(self) -> ChainOptions:
        """These options with the length a run uses (the file's in place of the option's)."""
        if not self.length_file:
            return self
        return dataclasses.replace(self, **{self.CHAIN_LENGTH: length_from_file(self.length_file,
                                                                                 self.CHAIN_LENGTH)})


def chain_methods() -> list[str]:
    """The catalog's chain drafters with a tunable length: the methods whose options extend ``ChainOptions``."""
    return [name for name in method_names() if issubclass(options_type(name), ChainOptions)]


def chain_field(method: str) -> str:
    """The option that is ``method``'s chain length (sd: gamma, pard: k, dflash: verify_length)."""
    return options_type(method).CHAIN_LENGTH
