"""`python -m harness regenerate`: the target's own continuations as a token stream, the same for one seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import SamplingConfig, generate, wrap_model
from harness.training.regenerate import RegenerateOptions, regenerate
from harness.data.token_streams import load_tokens, save_tokens
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from tests.helpers import make_llama

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model():
    return make_llama(vocab=50, hidden=32, layers=2, heads=4, seed=4, init_range=0.3)


def test_greedy_rows_are_the_targets_greedy_continuations(model):
    tokens = torch.randint(50, (400,), generator=torch.Generator().manual_seed(0))
    options = RegenerateOptions(sequences=5, prompt_len=6, new_tokens=9, greedy_share=0.4, batch_size=2, seed=3)
    stream = regenerate(model, tokens, options, progress=False)
    assert stream.shape == (5 * 15,)
    rows = stream.view(5, 15)
    target = wrap_model(model)
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    for row in rows[: options.greedy_sequences]:  # the first two: greedy
        assert row[6:].tolist() == generate(target, ar, row[None, :6], 9, SamplingConfig()).output_ids
    assert torch.equal(stream, regenerate(model, tokens, options, progress=False))  # one seed, one stream
    other = regenerate(model, tokens, RegenerateOptions(5, 6, 9, 0.4, 2, seed=4), progress=False)
    assert not torch.equal(stream, other)


def test_bad_options_are_one_line():
    with pytest.raises(DraftcountError, match="greedy_share must be in"):
        RegenerateOptions(greedy_share=1.5)
    with pytest.raises(DraftcountError, match=">= 1"):
        RegenerateOptions(new_tokens=0)


def test_the_command_writes_a_token_stream(tmp_path, model):
    model.save_pretrained(tmp_path / "target")
    save_tokens(tmp_path / "train.pt", torch.randint(50, (300,), generator=torch.Generator().manual_seed(1)))
    result = subprocess.run([sys.executable, "-m", "harness", "regenerate", "--target", str(tmp_path / "target"),
                             "--tokens", str(tmp_path / "train.pt"), "--out", str(tmp_path / "regen.pt"),
                             "--sequences", "3", "--prompt-len", "4", "--new-tokens", "5", "--no-progress"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert load_tokens(tmp_path / "regen.pt").shape == (27,) and '"greedy": 2' in result.stdout
