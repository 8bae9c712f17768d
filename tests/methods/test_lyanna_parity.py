"""Equal parameters in the claims rows (``methods/lyanna/parity.py``): said only where lyanna's and eagle's drafter
parameter counts in the records differ by at most 2%, read from the records by the claims table's eagle rows."""

from __future__ import annotations

import pandas as pd
import pytest

from methods.lyanna.claims import claims_table
from methods.lyanna.parity import EQUAL_PARAMETERS, parameter_note
from tests.methods.test_lyanna_claims import turns


def frame(lyanna: int | None, eagle: int | None) -> pd.DataFrame:
    size = {"drafter_parameters": lyanna} if lyanna else {}
    return pd.DataFrame(turns("lyanna", "lyanna", 1.2, details=size, seed=1)
                        + turns("eagle", "eagle", 1.2, details={"drafter_parameters": eagle} if eagle else {}))


@pytest.mark.parametrize(("lyanna", "eagle", "label"), [
    (1_000_000, 1_000_000, "equal parameters"), (1_020_000, 1_000_000, "equal parameters"),
    (980_000, 1_000_000, "equal parameters"), (1_021_000, 1_000_000, "parameters differ"),
    (4_920_576, 4_203_648, "parameters differ"),  # the real target's full-width lyanna against eagle: +17.1%
    (934_208, 934_400, "equal parameters"),  # the zoo's matched lyanna at 235549a
])
def test_equal_parameters_only_within_two_percent(lyanna, eagle, label):
    note = parameter_note(frame(lyanna, eagle), "lyanna", "eagle")
    assert note.startswith(f"{label}: lyanna {lyanna:,}, eagle {eagle:,} (")
    assert (abs(lyanna - eagle) <= EQUAL_PARAMETERS * eagle) == (label == "equal parameters")


def test_the_eagle_claims_rows_carry_the_note():
    """Every eagle row of the claims table says what the records say of the two drafters' sizes; none says equal
    parameters where they are 17% apart, and without counts in the records the row says so."""
    rows = claims_table(frame(4_920_576, 4_203_648))
    eagle = rows[rows.claim == "eagle"]
    assert len(eagle) >= 2 and all("parameters differ: lyanna 4,920,576, eagle 4,203,648 (+17.1%)" in note
                                   for note in eagle.note)
    assert not rows.note.str.contains("equal parameters").any()
    unknown = claims_table(frame(None, 4_203_648))
    assert all("drafter parameters not recorded" in note for note in unknown[unknown.claim == "eagle"].note)
