"""Typed option records: every method's options are a frozen dataclass.

An unknown key is an error that names the key and lists the valid ones; values
given as strings (from the command line or YAML) are converted to the field's
declared type.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from harness.errors import DraftcountError

OptionsT = TypeVar("OptionsT")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        text = value if not isinstance(value, str) else value.strip()
        for allowed in args:
            if text == allowed or (isinstance(text, str) and str(allowed) == text):
                return allowed
        raise DraftcountError(f"{where} must be one of {list(args)}, got {value!r}")
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            if type(None) in args:
                return None
        last_error: DraftcountError | None = None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except DraftcountError as error:
                last_error = error
        raise last_error or DraftcountError(f"{where}: cannot use {value!r}")
    if origin in (tuple, list):
        items = value.split(",") if isinstance(value, str) else list(value)
        item_type = args[0] if args else str
        converted = [_coerce(item, item_type, where) for item in items]
        return tuple(converted) if origin is tuple else converted
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise DraftcountError(f"{where} must be true or false, got {value!r}")
    if annotation in (int, float, str):
        try:
            if annotation is int and isinstance(value, float) and not value.is_integer():
                raise ValueError
            return annotation(value)
        except (TypeError, ValueError):
            raise DraftcountError(f"{where} must be {annotation.__name__}, got {value!r}") from None
    return value


def parse_options(options_type: type[OptionsT], values: Mapping[str, Any], owner: str) -> OptionsT:
    """Build ``options_type`` from ``values``; unknown keys and bad values raise DraftcountError."""
    fields = {field.name: field for field in dataclasses.fields(options_type)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise DraftcountError(
            f"unknown option {unknown[0]!r} for {owner}; valid options: {', '.join(sorted(fields)) or '(none)'}"
        )
    hints = typing.get_type_hints(options_type)
    converted = {
        name: _coerce(value, hints[name], f"option {name!r} of {owner}") for name, value in values.items()
    }
    try:
        return options_type(**converted)
    except (TypeError, ValueError) as error:
        raise DraftcountError(f"invalid options for {owner}: {error}") from None


def parse_key_values(pairs: list[str] | None) -> dict[str, str]:
    """Turn ``["gamma=3", "policy=chain"]`` into a dict; a pair without '=' is an error."""
    parsed: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise DraftcountError(f"option {pair!r} is not of the form KEY=VALUE")
        parsed[key.strip()] = value.strip()
    return parsed


def options_as_dict(options: Any) -> dict[str, Any]:
    """A JSON-friendly dict of an options dataclass (for result records), as it ran: options with an ``as_run()``
    (a beam drafter's, whose shape file decides its depth and budget) give the values the run used."""
    options = options.as_run() if hasattr(options, "as_run") else options
    return {key: list(value) if isinstance(value, tuple) else value for key, value in dataclasses.asdict(options).items()}
