"""Bad input gets one clear line naming the problem, from the API and from the CLI."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import DraftcountError, SamplingConfig, generate, load_model
from harness.cli import main
from harness.backend.models import check_same_tokenizer
from harness.data.token_streams import save_tokens
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec, parse_method_options
from harness.training.drafters import DrafterTrainRequest


def test_missing_model_path(tmp_path):
    with pytest.raises(DraftcountError, match="does not exist"):
        load_model(str(tmp_path / "nope"))


def test_directory_without_model(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DraftcountError, match="holds no model"):
        load_model(str(tmp_path / "empty"))


def test_draft_with_another_tokenizer(model_dirs):
    target = load_model(str(model_dirs["target"]))
    other = load_model(str(model_dirs["other_draft"]))
    with pytest.raises(DraftcountError, match="tokenizer .* differs"):
        check_same_tokenizer(target, other)
    with pytest.raises(DraftcountError, match="differs"):
        build_adapter("sd", {}, BuildInputs(target, other, None))


def test_prompt_longer_than_context(model_dirs):
    target = load_model(str(model_dirs["target"]))
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    too_long = torch.zeros((1, 1020), dtype=torch.long)
    with pytest.raises(DraftcountError, match="more than the model's context of 1024"):
        generate(target, ar, too_long, 10, SamplingConfig(), prompt_name="p1")


def test_unknown_method_and_option():
    with pytest.raises(DraftcountError, match="unknown method 'nope'; known methods: ar, sd, tree_sd, eagle, lyanna"):
        method_spec("nope")
    with pytest.raises(DraftcountError, match="unknown option 'gama' for method 'sd'; valid options: drafts, gamma, length_file"):
        parse_method_options("sd", {"gama": 3})
    with pytest.raises(DraftcountError, match="must be int"):
        parse_method_options("sd", {"gamma": "three"})
    with pytest.raises(DraftcountError, match="gamma"):
        parse_method_options("sd", {"gamma": 0})


def test_sd_without_draft(random_pair):
    target, _ = random_pair
    with pytest.raises(DraftcountError, match="needs a draft model"):
        build_adapter("sd", {}, BuildInputs(target, None, None))


def _cli(args):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case", ["missing_target", "unknown_method", "unknown_option", "unknown_verifier",
                                  "bad_tokenizer", "long_prompt"])
def test_cli_errors_are_one_line(model_dirs, tmp_path, capsys, case):
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello world\n")
    base = ["run", "--target", str(model_dirs["target"]), "--prompts", str(prompts), "--out", str(tmp_path / "o.jsonl"),
            "--max-new-tokens", "4", "--no-progress"]
    args, expected = {
        "missing_target": (["run", "--method", "ar", "--target", str(tmp_path / "missing"), "--prompts", str(prompts),
                            "--out", str(tmp_path / "o.jsonl")], "does not exist"),
        "unknown_method": (base + ["--method", "lookahead"], "unknown method 'lookahead'"),
        "unknown_option": (base + ["--method", "sd", "--draft", str(model_dirs["draft"]), "--opt", "gama=2"],
                           "unknown option 'gama'"),
        "unknown_verifier": (base + ["--method", "ar", "--verifier", "exact"], "unknown verifier 'exact'"),
        "bad_tokenizer": (base + ["--method", "sd", "--draft", str(model_dirs["other_draft"])], "tokenizer"),
        "long_prompt": (base + ["--method", "ar", "--max-new-tokens", "1023"], "context of 1024"),
    }[case]
    if case == "missing_target":  # one case through `python -m harness` itself, the others in this process
        result = _cli(args)
        returncode, stderr = result.returncode, result.stderr
    else:  # an exception other than the one-line error fails the test here as a traceback would there
        returncode, stderr = main(args), capsys.readouterr().err
    assert returncode == 2
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and expected in lines[0], stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_main_returns_2_on_error(tmp_path, capsys):
    assert main(["run", "--method", "x", "--target", "t", "--prompts", "p", "--out", str(tmp_path / "o")]) == 2
    assert "unknown method" in capsys.readouterr().err


def _corrupt(directory: Path, case: str) -> Path:
    """Damage one file of a model or drafter directory as a failed copy or a killed download would; the file."""
    if case == "bad_config":
        path = directory / "config.json"
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
        return path
    path = directory / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if case == "truncated" else b"\xff" * 16 + data[16:])
    return path


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture(scope="module")
def eagle_drafter(model_dirs, tmp_path_factory) -> Path:
    """A fresh (untrained) eagle drafter for the test target, as ``train --steps 0`` writes it."""
    root = tmp_path_factory.mktemp("eagle-drafter")
    save_tokens(root / "tokens.pt", torch.randint(0, 300, (4096,), generator=torch.Generator().manual_seed(0)))
    request = DrafterTrainRequest(method="eagle", target=str(model_dirs["target"]), data=root / "tokens.pt",
                                  out=root / "eagle", steps=0, progress=False, options={"seq_len": "32"})
    method_spec("eagle").train(request)
    return root / "eagle"


@pytest.mark.parametrize("what", ["target", "drafter"])
@pytest.mark.parametrize("case", ["header_garbage", "truncated", "bad_config"])
def test_a_corrupt_model_or_drafter_file_is_one_line_naming_it(model_dirs, eagle_drafter, tmp_path, capsys, what, case):
    target = shutil.copytree(model_dirs["target"], tmp_path / "target")
    drafter = shutil.copytree(eagle_drafter, tmp_path / "drafter")
    damaged = _corrupt(target if what == "target" else drafter, case)
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello world\n")
    returncode = main(["run", "--method", "eagle", "--target", str(target), "--drafter", str(drafter), "--prompts",
                       str(prompts), "--out", str(tmp_path / "o.jsonl"), "--max-new-tokens", "4", "--no-progress"])
    line = _one_error_line(capsys.readouterr().err)
    assert returncode == 2 and str(damaged) in line, line
    assert ("not valid JSON" if case == "bad_config" else "corrupt or truncated") in line


def test_a_truncated_token_stream_fails_training_in_one_line(model_dirs, tmp_path, capsys):
    stream = tmp_path / "tokens.pt"
    save_tokens(stream, torch.arange(4096))
    stream.write_bytes(stream.read_bytes()[:300])
    returncode = main(["train", "--method", "eagle", "--target", str(model_dirs["target"]), "--data", str(stream),
                       "--out", str(tmp_path / "eagle"), "--steps", "1", "--no-progress"])
    line = _one_error_line(capsys.readouterr().err)
    assert returncode == 2 and f"token stream {stream} is corrupt or truncated" in line, line
