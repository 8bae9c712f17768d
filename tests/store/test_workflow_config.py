"""The workflow's config against its schema (harness/store/workflow_config.py): --config's strings coerced to the types the
schema asks for, and a rejected config as one line naming the place, the problem and the section's keys."""

from pathlib import Path

import pytest
import yaml

from harness.errors import DraftcountError
from harness.store.workflow_config import checked_config, coerce_config, coerced_value, config_error, load_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="module")
def schema():
    return load_schema(SCHEMA_PATH)


@pytest.fixture
def default():
    return yaml.safe_load((ROOT / "workflow" / "config" / "default.yaml").read_text())


def test_the_default_config_is_valid(schema, default):
    assert config_error(default, schema) is None


@pytest.mark.parametrize("text,types,value", [
    ("true", {"boolean"}, True), ("False", {"boolean"}, False), ("on", {"boolean"}, True),
    ("3", {"integer"}, 3), ("0.5", {"number"}, 0.5), ("7", {"integer", "string"}, 7),
    ("maybe", {"boolean"}, "maybe"), ("x", {"integer"}, "x"),
])
def test_coerced_value(text, types, value):
    assert coerced_value(text, types) == value and type(coerced_value(text, types)) is type(value)


def test_snakemakes_strings_become_the_schemas_types(schema, default):
    """`--config allow_weak_models=true threads=2` and a nested YAML value as Snakemake passes them: strings."""
    default.update(allow_weak_models="true", threads="2")
    default["target"]["train"]["lr"] = "0.004"
    changed = coerce_config(default, schema)
    assert default["allow_weak_models"] is True and default["threads"] == 2 and default["target"]["train"]["lr"] == 0.004
    assert set(changed) == {"allow_weak_models", "threads", "target.train.lr"}
    assert config_error(default, schema) is None


@pytest.mark.parametrize("change,says", [
    (lambda c: c.update(tokenzier={}), "the top level: unknown key 'tokenzier' (did you mean 'tokenizer'?); "
                                       "allowed keys: allow_weak_models, bench,"),
    (lambda c: c["target"]["train"].update(stpes=5), "target.train: unknown key 'stpes' (did you mean 'steps'?); "
                                                     "allowed keys: batch_size,"),
    (lambda c: c.update(allow_weak_models="maybe"), "allow_weak_models: 'maybe' is not of type boolean"),
    (lambda c: c.update(threads=0), "threads: 0 breaks the schema's rule minimum: 1"),
])
def test_a_bad_config_is_one_short_line(schema, default, change, says):
    change(default)
    with pytest.raises(DraftcountError) as error:
        checked_config(default, SCHEMA_PATH)
    message = str(error.value)
    assert message.startswith("config: ") and says in message and "\n" not in message and len(message) < 700, message
