"""Data-parallel drafter training: two CPU processes (torchrun, gloo) take the same steps as one process over
the same global batch.

One torchrun launch (this file run as a module, ``_worker``) trains in two processes: a tiny LM through the loop
in bf16, the loop under a time budget with one process's clock running at half speed, and an EAGLE head through
``python -m harness train``'s own ``main``. The tests then train the same things in this process, with
``grad_accum=2`` and with one batch of twice the rows, and compare the per-step loss curves.

Tolerance: the two processes and ``grad_accum=2`` compute the same micro-batches and add the same two gradients,
so they agree to float rounding (measured: bitwise); one batch of 8 rows averages its loss in one reduction
instead of two means of 4, a relative difference of about 1e-7 in fp32 that Adam carries through 10 steps
(measured 1.1e-7). 1e-5 leaves 100x headroom, while a curve over half the global batch (what two processes that
drew the same rows would see) is about 1e-2 away: the comparison can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.data.token_streams import save_tokens
from harness.training import distributed
from harness.training.distributed import Shard, World, step_shards
from harness.training.loop import TrainConfig, train
from tests.helpers import make_llama, sharded_lm_loss, markov_batches

ROOT = Path(__file__).resolve().parents[2]
TOKENS = torch.randint(0, 32, (5000,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
STEPS = 10
RELATIVE = 1e-5


def _lm_curve(batch_size, grad_accum, precision="bf16"):
    model = make_llama(vocab=32, hidden=16, layers=1, heads=2, seed=5)
    config = TrainConfig(steps=STEPS, warmup_steps=2, lr=1e-2, precision=precision, grad_accum=grad_accum)
    return train(model, sharded_lm_loss(model, TOKENS, batch_size), config, progress=False, sharded=True).losses


def _eagle_request(root: Path, out: str, **options):
    from harness.training.drafters import DrafterTrainRequest

    return DrafterTrainRequest(method="eagle", target=str(root / "target"), data=root / "tokens.pt", out=root / out,
                               steps=STEPS, progress=False,
                               options={"seq_len": "24", "lr": "3e-3", "warmup_steps": "2", **options})


def _worker(root: Path) -> int:
    """Run in each of the two processes torchrun starts."""
    from harness.cli import main

    rank = distributed.world().rank
    (root / f"lm-{rank}.json").write_text(json.dumps(_lm_curve(batch_size=4, grad_accum=1)))

    model = make_llama(vocab=32, hidden=16, layers=1, heads=2, seed=5)
    real = time.perf_counter
    if rank == 1:  # a clock at half speed: only an agreed stop keeps the ranks in step (else rank 0 stops alone)
        time.perf_counter = lambda: real() / 2
    result = train(model, sharded_lm_loss(model, TOKENS, 2), TrainConfig(steps=100_000, time_budget_s=1.0), progress=False,
                   sharded=True)
    time.perf_counter = real
    weights = float(sum(p.double().sum() for p in model.parameters()))
    (root / f"budget-{rank}.json").write_text(json.dumps([result.steps, result.stopped_by, weights]))

    request = _eagle_request(root, "two")
    options = [f"--opt={key}={value}" for key, value in {**request.options, "batch_size": 4}.items()]
    return main(["train", "--method", "eagle", "--target", request.target, "--data", str(request.data), "--out",
          str(request.out), "--steps", str(STEPS), "--metrics", str(root / "two.json"), "--no-progress", *options])


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    root = tmp_path_factory.mktemp("distributed")
    make_llama(vocab=48, hidden=32, layers=2, heads=4, seed=2).save_pretrained(root / "target")
    batches = markov_batches(48, 64, 48, seed=5)
    save_tokens(root / "tokens.pt", torch.cat([next(batches).flatten() for _ in range(2)]))
    env = {key: value for key, value in os.environ.items() if key not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "tests.training.test_distributed", str(root)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


def _relative_gap(curve, reference):
    assert len(curve) == len(reference) == STEPS
    return max(abs(a - b) / abs(b) for a, b in zip(curve, reference))


def test_two_processes_train_an_eagle_head_like_one_process_over_the_same_global_batch(two_processes):
    from methods.eagle.training import train_eagle

    metrics = json.loads((two_processes / "two.json").read_text())["train"]
    assert metrics["steps"] == STEPS and metrics["tokens"] == STEPS * 8 * 24
    two = metrics["losses"]
    accumulated = train_eagle(_eagle_request(two_processes, "accum", batch_size="4", grad_accum="2"))["train"]
    assert _relative_gap(two, accumulated["losses"]) < RELATIVE
    assert _relative_gap(two, train_eagle(_eagle_request(two_processes, "b8", batch_size="8"))["train"]["losses"]) \
        < RELATIVE
    half = train_eagle(_eagle_request(two_processes, "b4", batch_size="4"))["train"]["losses"]
    assert _relative_gap(two, half) > 100 * RELATIVE  # the rows of one process alone give another curve
    assert two[-1] < two[0]
    # rank 0 alone wrote the drafter (and the metrics); a second writer would have raced on two.partial
    assert (two_processes / "two" / "model.safetensors").is_file()
    assert not (two_processes / "two.partial").exists()


def test_two_processes_in_bf16_match_accumulation_and_one_big_batch(two_processes):
    two = json.loads((two_processes / "lm-0.json").read_text())
    assert two == json.loads((two_processes / "lm-1.json").read_text())  # every rank reports the global loss
    assert _relative_gap(two, _lm_curve(batch_size=4, grad_accum=2)) < RELATIVE
    assert _relative_gap(two, _lm_curve(batch_size=8, grad_accum=1)) < 1e-3  # bf16 matmuls of 8 rows, not 4
    assert _relative_gap(two, _lm_curve(batch_size=4, grad_accum=1)) > 100 * RELATIVE


def test_the_time_budget_stop_is_agreed_so_the_processes_take_the_same_steps(two_processes):
    first, second = (json.loads((two_processes / f"budget-{rank}.json").read_text()) for rank in (0, 1))
    assert first == second  # same steps, stopped by the budget, same weights
    assert first[1] == "time_budget" and 0 < first[0] < 100_000


def test_shards_split_a_global_batch_into_disjoint_micro_batches(tmp_path):
    """``shard_batch`` gives rows of ``source.batch(global size)`` without loading the others: from a feature
    dump and computed on the fly, every micro-batch of every split is its slice of the global batch."""
    from harness.training.drafters import shard_batch
    from harness.training.features import FeatureSource, dump_features

    model = make_llama(vocab=32, hidden=16, layers=2, heads=2, seed=1)
    dump_features(model, TOKENS, tmp_path / "dump", sequences=24, seq_len=12, layers=[1, "last"], shard_size=10,
                  dtype="float32", seed=0)
    sources = [FeatureSource([1, "last"], 12, dump_dir=tmp_path / "dump"),
               FeatureSource([1, "last"], 12, target=model, tokens=TOKENS)]
    for source in sources:
        whole = source.batch(8, torch.Generator().manual_seed(3))
        for batch_size, count in ((8, 1), (4, 2), (2, 4)):
            parts = [shard_batch(source, batch_size, Shard(index, count), torch.Generator().manual_seed(3))
                     for index in range(count)]
            for key, value in whole.items():
                torch.testing.assert_close(torch.cat([part[key] for part in parts]), value, rtol=1e-5, atol=1e-5)
                assert all(part[key].dtype == value.dtype for part in parts)


def test_step_shards_and_world():
    assert step_shards(World(rank=0, size=1), 1) == [Shard(0, 1)]
    assert step_shards(World(rank=1, size=2), 2) == [Shard(2, 4), Shard(3, 4)]
    assert Shard(2, 4).rows(3) == slice(6, 9)
    assert distributed.world() == World() and distributed.is_main()
    assert distributed.local_device("cuda") == "cuda" and distributed.local_device("cpu") == "cpu"


def test_torchrun_environment(monkeypatch):
    from harness.errors import DraftcountError

    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    assert distributed.world() == World(rank=1, size=2, local_rank=1) and not distributed.is_main()
    assert distributed.local_device("cuda") == "cuda:1" and distributed.local_device("cpu") == "cpu"
    with pytest.raises(DraftcountError, match="pass --device cuda"):
        distributed.local_device("cuda:0")
    model = make_llama(vocab=32, hidden=16, layers=1, heads=2)
    with pytest.raises(DraftcountError, match="draws whole batches"):  # before joining any process group
        train(model, lambda step: (model.lm_head.weight.sum(), 1), TrainConfig(steps=1), progress=False)
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(DraftcountError, match="RANK 2 is not a process of WORLD_SIZE 2"):
        distributed.world()


if __name__ == "__main__":
    sys.exit(_worker(Path(sys.argv[1])))
