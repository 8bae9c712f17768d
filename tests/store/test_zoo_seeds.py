"""The second zoo (config ``target_seeds``, ``harness/store/zoo_seeds.py``): its config from the main one, every
training seed shifted, no studies, the decisive variants only; its records copied as ``<variant>_target<s>``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.errors import DraftcountError
from harness.store.records import read_records
from harness.store.zoo_seeds import write_target_seed_records, zoo_seed_config

ROOT = Path(__file__).resolve().parents[2]


def default_config() -> dict:
    return yaml.safe_load((ROOT / "workflow" / "config" / "default.yaml").read_text())


def test_the_second_zoo_retrains_every_model_with_shifted_seeds_and_runs_the_decisive_variants_only():
    config = default_config()
    zoo = zoo_seed_config(config)
    assert config["target_seeds"] == {"seed": 1, "variants": ["eagle", "lyanna", "sd", "tree_sd"]}
    assert (zoo["target"]["train"]["seed"], zoo["draft"]["train"]["seed"]) == (1, 2)  # the main zoo's: 0 and 1
    assert all(entry["options"]["seed"] == config["drafters"][name]["options"]["seed"] + 1
               for name, entry in zoo["drafters"].items())
    assert zoo["bench"]["only"] == ["ar_control", "eagle", "lyanna", "sd", "tree_sd"]
    assert (zoo["work_dir"], zoo["results_dir"]) == ("work-zoo-seed1", "results/zoo-seed1")
    assert not {"real", "target_seeds", "seeds_study", "lr_study", "learning_curves", "dump_precision"} & set(zoo)
    assert zoo["corpus"] == config["corpus"] and zoo["features"] == config["features"]  # the same data
    assert config["target"]["train"]["seed"] == 0 and "only" not in config["bench"]  # the main config untouched
    assert zoo_seed_config({key: value for key, value in config.items() if key != "target_seeds"}) is None


def test_it_runs_only_the_variants_the_config_runs_and_none_is_off():
    config = default_config()
    config["bench"]["only"] = ["ar", "ar_control", "eagle", "pld"]  # a config that runs no lyanna, sd or tree_sd
    assert zoo_seed_config(config)["bench"]["only"] == ["ar_control", "eagle"]
    config["bench"]["only"] = ["ar", "pld"]
    assert zoo_seed_config(config) is None
    config = default_config()
    config["target_seeds"]["variants"] = []  # the smoke profile's: off
    assert zoo_seed_config(config) is None
    config["target_seeds"]["variants"] = ["sd", "dspark_b24"]  # a config standing alone without those variants
    config["bench"]["methods"] = {"ar": {}, "sd": {"gamma": "auto"}}
    assert zoo_seed_config(config)["bench"]["only"] == ["sd"]


def test_a_second_zoo_it_cannot_build_is_one_line():
    config = default_config()
    config["gguf"] = {"package": "x"}
    with pytest.raises(DraftcountError, match="has none to retrain"):
        zoo_seed_config(config)


def test_its_records_are_copied_with_the_method_variant_renamed(tmp_path):
    source = tmp_path / "raw" / "lyanna" / "stdlib_code-t0.jsonl"
    source.parent.mkdir(parents=True)
    records = [{"schema_version": 1, "role": "method", "method": "lyanna", "variant": "lyanna", "pair_id": "p#0"},
               {"schema_version": 1, "role": "baseline", "method": "ar", "variant": "ar", "pair_id": "p#0"}]
    source.write_text("".join(json.dumps(record) + "\n" for record in records))
    out = tmp_path / "copy" / "lyanna_target1" / "stdlib_code-t0.jsonl"
    assert write_target_seed_records(source, out, 1) == 2
    assert [record["variant"] for record in read_records(out)] == ["lyanna_target1", "ar"]
    assert [{**record, "variant": None} for record in read_records(out)] == [{**record, "variant": None}
                                                                              for record in records]
