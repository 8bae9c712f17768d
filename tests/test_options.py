from dataclasses import dataclass
from typing import Literal

import pytest

from harness.errors import DraftcountError
from harness.options import options_as_dict, parse_key_values, parse_options


@dataclass(frozen=True)
class Example:
    depth: int = 3
    weight: float = 0.5
    policy: Literal["a", "b"] = "a"
    fused: bool = False
    shape: tuple[int, ...] = (4, 2)
    limit: int | None = None


def test_strings_are_converted_to_field_types():
    parsed = parse_options(Example, {"depth": "5", "weight": "1", "policy": "b", "fused": "on", "shape": "3,2,1",
                                     "limit": "none"}, "example")
    assert parsed == Example(5, 1.0, "b", True, (3, 2, 1), None)
    assert options_as_dict(parsed)["shape"] == [3, 2, 1]


@pytest.mark.parametrize("values,message", [
    ({"dept": 1}, "unknown option 'dept' for example; valid options: depth, fused, limit, policy, shape, weight"),
    ({"policy": "c"}, "must be one of"),
    ({"fused": "maybe"}, "true or false"),
    ({"depth": "2.5"}, "must be int"),
])
def test_bad_values(values, message):
    with pytest.raises(DraftcountError, match=message):
        parse_options(Example, values, "example")


def test_key_values():
    assert parse_key_values(["a=1", " b = x "]) == {"a": "1", "b": "x"}
    with pytest.raises(DraftcountError, match="KEY=VALUE"):
        parse_key_values(["novalue"])
