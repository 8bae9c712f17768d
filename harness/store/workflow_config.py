"""The workflow's config checked against its schema (workflow/schemas/config.schema.yaml), as one line.

Snakemake's ``--config key=value`` passes ``true`` and ``false`` (and numbers inside a YAML value) as strings, so
values are first coerced where the schema asks for a boolean, an integer or a number (``coerce_config``). A config
the schema rejects stops the workflow with one line (``config_error``): where the problem is, what is wrong and, for
a key the section does not know, the keys it allows. Torch-free: the Snakefile calls it before planning anything.
"""

from __future__ import annotations

import difflib
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from harness.errors import DraftcountError

TRUE_WORDS = {"true", "yes", "on"}
FALSE_WORDS = {"false", "no", "off"}
MAX_COERCIONS = 10_000  # a config has far fewer values than this; the loop below cannot run away
T = TypeVar("T")


SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's loader where PyYAML has it: the schema
# (about 1,700 lines) parses in a tenth of the pure-Python loader's time, at every plan


@functools.lru_cache(maxsize=8)
def load_schema(path: Path) -> dict:
    """The config schema at ``path``, parsed once a process (read-only: callers must not change it)."""
    return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=SAFE_LOADER)


def _types(error: ValidationError) -> set[str]:
    expected = error.validator_value
    return set(expected) if isinstance(expected, list) else {expected}


def coerced_value(text: str, types: set[str]) -> Any:
    """``text`` as the first of ``types`` it reads as (boolean, integer, number), or ``text`` itself."""
    word = text.strip().lower()
    if "boolean" in types and word in TRUE_WORDS | FALSE_WORDS:
        return word in TRUE_WORDS
    for kind, parse in (("integer", int), ("number", float)):
        if kind in types:
            try:
                return parse(text.strip())
            except ValueError:
                continue
    return text


def _set_at(config: dict, path: list[Any], value: Any) -> None:
    holder = config
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value


def _string_type_errors(validator: Draft202012Validator, config: dict) -> Iterator[ValidationError]:
    """The type errors of string values the schema wants as something else, inside any/oneOf branches too."""
    pending = list(validator.iter_errors(config))
    while pending:
        error = pending.pop()
        pending.extend(error.context or [])
        if error.validator == "type" and isinstance(error.instance, str) and error.absolute_path:
            yield error


def coerce_config(config: dict, schema: dict) -> list[str]:
    """Turn string values into the boolean, integer or number the schema asks for at their place, in place (what
    ``--config allow_weak_models=true`` passes); returns the dotted keys it changed."""
    validator = Draft202012Validator(schema)
    changed: list[str] = []
    for _ in range(MAX_COERCIONS):
        for error in _string_type_errors(validator, config):
            value = coerced_value(error.instance, _types(error))
            if value is not error.instance and value != error.instance:
                _set_at(config, list(error.absolute_path), value)
                changed.append(dotted(error.absolute_path))
                break
        else:
            return changed
    return changed


def dotted(path: Any) -> str:
    return ".".join(str(part) for part in path) or "the top level"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _unknown_keys_line(error: ValidationError) -> str:
    allowed = sorted(error.schema.get("properties", {}))
    unknown = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
    where = dotted(error.absolute_path)
    if not unknown:
        return f"{where}: {error.message}"
    close = difflib.get_close_matches(unknown[0], allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{where}: unknown key {unknown[0]!r}{hint}; allowed keys: {', '.join(allowed)}"


def _required_line(error: ValidationError) -> str:
    where = dotted(error.absolute_path)
    branches = error.schema.get("anyOf") or error.schema.get("oneOf")
    if error.validator in ("anyOf", "oneOf") and branches and all("required" in branch for branch in branches):
        options = " | ".join("[" + ", ".join(branch["required"]) + "]" for branch in branches)
        return f"{where}: needs the keys of one of {options}"
    return f"{where}: {error.message}"


def error_line(error: ValidationError) -> str:
    """One line for a schema error: where, what, and for an unknown key the keys its section allows."""
    where = dotted(error.absolute_path)
    if error.validator == "additionalProperties":
        return _unknown_keys_line(error)
    if error.validator in ("anyOf", "oneOf"):
        return _required_line(error)
    if error.validator == "type":
        return f"{where}: {_short(error.instance)} is not of type {' or '.join(sorted(_types(error)))}"
    if error.validator == "enum":
        return f"{where}: {_short(error.instance)} is not one of {', '.join(map(str, error.validator_value))}"
    if error.validator == "required":
        return f"{where}: {error.message}"
    return f"{where}: {_short(error.instance)} breaks the schema's rule {error.validator}: " \
           f"{_short(error.validator_value)}"


def config_error(config: dict, schema: dict) -> str | None:
    """The one-line problem with ``config`` (None: it is valid)."""
    error = best_match(Draft202012Validator(schema).iter_errors(config))
    if error is None:
        return None
    return " ".join(error_line(error).split())


def checked_config(config: dict, schema_path: Path) -> dict:
    """``config`` coerced in place and validated; raises one line (``DraftcountError``) if the schema rejects it."""
    schema = load_schema(schema_path)
    coerce_config(config, schema)
    problem = config_error(config, schema)
    if problem:
        raise DraftcountError(f"config: {problem}")
    return config


def or_stop(call: Callable[[], T]) -> T:
    """``call()``, or, when it raises the project's one-line error (or a ``ValueError``), the workflow stopped with
    that line (``error: ...``, exit status 1) instead of Snakemake's stack: what the Snakefile and the rules run at
    plan time go through it."""
    try:
        return call()
    except (ValueError, DraftcountError) as error:
        sys.exit(f"error: {error}")
