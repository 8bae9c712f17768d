"""Training FLOPs as the kit counts them (``harness.training.flops``): torch's counter with the CPU's fused
attention added, one step's count times the steps whatever the batch's split, and a drafter's count the same
whether its features came from a dump or were computed on the fly."""

from __future__ import annotations

import json

import torch

from harness.backend.models import load_model
from harness.cli import main
from harness.data.token_streams import save_tokens
from harness.store.drafter_meta import META_FILE
from harness.training.distributed import Shard
from harness.training.features import dump_features
from harness.training.flops import flop_counter
from harness.training.loop import TrainConfig, train


def test_the_counter_counts_products_and_the_cpus_attention():
    linear = torch.nn.Linear(16, 8, bias=False)
    x = torch.randn(10, 16)
    with flop_counter() as counter:
        linear(x).sum().backward()  # forward 2 x 10 x 16 x 8, backward the weight's gradient alone (x needs none)
    assert counter.get_total_flops() == 2 * (2 * 10 * 16 * 8)
    q = torch.randn(2, 4, 64, 16)
    with flop_counter() as counter:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert counter.get_total_flops() == 2 * (2 * 2 * 4 * 64 * 64 * 16)  # QK^T and AV, causal counted as full


def test_a_runs_flops_are_one_steps_count_times_the_steps_however_the_batch_is_split():
    data = torch.randn(64, 12, generator=torch.Generator().manual_seed(0))

    def run(batch_size: int, grad_accum: int) -> float:
        module = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 1))

        def loss_fn(step: int, shard: Shard):
            rows = data[(step * 4) % 60:][:4][shard.rows(batch_size)]
            return module(rows).pow(2).mean(), rows.shape[0]

        result = train(module, loss_fn, TrainConfig(steps=5, lr=1e-3, warmup_steps=1, grad_accum=grad_accum),
                       progress=False, sharded=True)
        return result.flops

    # per step: 4 rows through 12 -> 24 -> 1, forward and backward (the first layer's input needs no gradient)
    per_step = 2 * 4 * (12 * 24 + 24 * 1) + 2 * 4 * 12 * 24 + 2 * 2 * 4 * 24 * 1
    assert run(4, 1) == run(2, 2) == 5 * per_step


def test_a_drafters_flops_are_the_same_from_a_dump_or_on_the_fly(tmp_path, model_dirs):
    tokens = tmp_path / "tokens.pt"
    stream = torch.randint(0, 200, (4000,), generator=torch.Generator(device="cpu").manual_seed(0))
    save_tokens(tokens, stream)
    target = load_model(str(model_dirs["target"]), "float32", "cpu", with_tokenizer=False)
    dump_features(target.model, stream, tmp_path / "dump", sequences=16, seq_len=32, layers=["last", 0, 1],
                  shard_size=8, dtype="float32", seed=0)
    counted = {}
    for source in ("tokens", "dump"):
        out, metrics = tmp_path / f"eagle-{source}", tmp_path / f"{source}.json"
        data = tokens if source == "tokens" else tmp_path / "dump"
        assert main(["train", "--method", "eagle", "--target", str(model_dirs["target"]), "--data", str(data),
                     "--out", str(out), "--steps", "3", "--no-progress", "--opt", "batch_size=2", "--opt",
                     "seq_len=32", "--metrics", str(metrics)]) == 0
        counted[source] = json.loads(metrics.read_text())["train"]["flops"]
        assert json.loads((out / META_FILE).read_text())["train_flops"] == counted[source]
    assert counted["tokens"] > 0 and counted["dump"] == counted["tokens"]


def test_a_two_phase_trainer_counts_both_phases(tmp_path, model_dirs):
    """PRISM trains in two phases, reported as one run: its FLOPs are both phases' (the metrics keep each phase's)."""
    tokens = tmp_path / "tokens.pt"
    save_tokens(tokens, torch.randint(0, 200, (4000,), generator=torch.Generator(device="cpu").manual_seed(0)))
    metrics = tmp_path / "prism.json"
    assert main(["train", "--method", "prism", "--target", str(model_dirs["target"]), "--data", str(tokens),
                 "--out", str(tmp_path / "prism"), "--steps", "4", "--no-progress", "--opt", "batch_size=2", "--opt",
                 "seq_len=32", "--metrics", str(metrics)]) == 0
    found = json.loads(metrics.read_text())
    assert found["phase1"]["flops"] > 0 and found["phase2"]["flops"] > 0
    assert found["train"]["flops"] == found["phase1"]["flops"] + found["phase2"]["flops"]
