"""The shared training loop: schedule, resume equals an uninterrupted run, bad checkpoints are never loaded,
gradient accumulation equals one big batch."""

import pytest
import torch

from harness.data.token_streams import random_windows
from harness.errors import DraftcountError
from harness.training.loop import TrainConfig, _run_key, batches_from_step, learning_rate, train
from tests.helpers import make_llama, sharded_lm_loss

TOKENS = torch.randint(0, 32, (5000,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)


def _loss_fn(model, fail_at=None):
    def loss_fn(step):
        if step == fail_at:
            raise KeyboardInterrupt("killed")
        windows = batches_from_step(step, 0, lambda g: random_windows(TOKENS, 4, 16, g))
        return model(input_ids=windows, labels=windows).loss, windows.numel()
    return loss_fn


def test_schedule_warmup_cosine_and_time_budget():
    config = TrainConfig(steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert learning_rate(config, 0, 0) == pytest.approx(0.1)
    assert learning_rate(config, 10, 0) == pytest.approx(1.0, abs=1e-3)
    assert learning_rate(config, 100, 0) == pytest.approx(0.1)
    timed = TrainConfig(steps=100, warmup_steps=0, lr=1.0, min_lr_ratio=0.0, time_budget_s=10)
    assert learning_rate(timed, 1, 10) == pytest.approx(0.0)  # out of time: at the floor
    assert learning_rate(timed, 50, 0) == pytest.approx(0.5)


def test_resume_reproduces_an_uninterrupted_run(tmp_path):
    config = TrainConfig(steps=12, warmup_steps=2, lr=1e-2, checkpoint_every_s=0.0, seed=3)
    reference = make_llama(vocab=32, hidden=16, layers=1, heads=2, seed=5)
    uninterrupted = train(reference, _loss_fn(reference), config, progress=False)

    checkpoint = tmp_path / "ckpt.pt"
    interrupted = make_llama(vocab=32, hidden=16, layers=1, heads=2, seed=5)
    with pytest.raises(KeyboardInterrupt):
        train(interrupted, _loss_fn(interrupted, fail_at=7), config, checkpoint=checkpoint, progress=False)
    assert checkpoint.is_file() and not checkpoint.with_name("ckpt.pt.partial").exists()

    resumed = make_llama(vocab=32, hidden=16, layers=1, heads=2, seed=99)  # different init: weights come from the checkpoint
    result = train(resumed, _loss_fn(resumed), config, checkpoint=checkpoint, progress=False)
    assert result.resumed_from_step == 7 and result.steps == 12
    assert result.losses == uninterrupted.losses and len(result.losses) == 12  # the curve is in the checkpoint
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)


def test_bad_or_foreign_checkpoints_are_not_resumed(tmp_path, capsys):
    checkpoint = tmp_path / "ckpt.pt"
    config = TrainConfig(steps=3, warmup_steps=0, checkpoint_every_s=0.0)
    model = make_llama(vocab=32, hidden=16, layers=1, heads=2)
    train(model, _loss_fn(model), config, checkpoint=checkpoint, fingerprint={"run": "a"}, progress=False)
    other = train(model, _loss_fn(model), config, checkpoint=checkpoint, fingerprint={"run": "b"}, progress=False)
    assert other.resumed_from_step == 0
    assert "another configuration" in capsys.readouterr().out
    checkpoint.write_bytes(b"half a checkpoint")
    assert train(model, _loss_fn(model), config, checkpoint=checkpoint, progress=False).resumed_from_step == 0
    assert "unreadable checkpoint" in capsys.readouterr().out


def test_time_budget_stops_training():
    model = make_llama(vocab=32, hidden=16, layers=1, heads=2)
    result = train(model, _loss_fn(model), TrainConfig(steps=10_000, time_budget_s=1.0), progress=False)
    assert result.stopped_by == "time_budget" and result.steps < 10_000


def test_non_finite_steps_are_skipped_and_a_diverged_run_stops_with_an_error():
    """A step whose loss is NaN leaves the weights as they were (the update is skipped and counted); a run whose
    loss stays non-finite stops with an error naming the learning rate, instead of training on NaN weights."""
    from harness.errors import DraftcountError

    model = make_llama(vocab=32, hidden=16, layers=1, heads=2, seed=1)
    clean = _loss_fn(model)
    poisoned = {3, 4}

    def loss_fn(step):
        loss, count = clean(step)
        return (loss * float("nan") if step in poisoned else loss), count

    result = train(model, loss_fn, TrainConfig(steps=8, warmup_steps=0, lr=1e-2), progress=False)
    assert result.skipped_steps == 2 and result.steps == 8 and torch.isfinite(torch.tensor(result.final_loss))
    assert all(torch.isfinite(p).all() for p in model.parameters())

    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with pytest.raises(DraftcountError, match="diverged.*lower the learning rate"):
        train(model, lambda step: (clean(step)[0] * float("inf"), 1),
              TrainConfig(steps=50, warmup_steps=0, max_nonfinite_steps=5), progress=False)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p, before[name], msg=name)


def test_gradient_accumulation_equals_one_big_batch():
    """grad_accum=2 over micro-batches of 4 rows takes the steps of one batch of 8 (float rounding apart);
    4 rows alone do not. A loss that draws whole batches cannot be accumulated."""
    curves = {}
    for batch_size, accum in ((4, 2), (8, 1), (4, 1)):
        model = make_llama(vocab=32, hidden=16, layers=1, heads=2, seed=5)
        config = TrainConfig(steps=6, warmup_steps=1, lr=1e-2, grad_accum=accum)
        result = train(model, sharded_lm_loss(model, TOKENS, batch_size), config, progress=False, sharded=True)
        assert result.tokens == 6 * batch_size * accum * 16
        curves[batch_size, accum] = torch.tensor(result.losses)
    torch.testing.assert_close(curves[4, 2], curves[8, 1], rtol=1e-5, atol=0)
    assert not torch.allclose(curves[4, 1], curves[8, 1], rtol=1e-3)
    model = make_llama(vocab=32, hidden=16, layers=1, heads=2)
    with pytest.raises(DraftcountError, match="cannot accumulate"):
        train(model, _loss_fn(model), TrainConfig(steps=1, grad_accum=2), progress=False)
    with pytest.raises(DraftcountError, match="grad_accum must be >= 1"):
        TrainConfig(grad_accum=0)


def test_checkpoint_keys_ignore_how_a_global_batch_is_split():
    """Old checkpoints (before grad_accum and warmup_fraction) still resume: the key of the fields they had, written
    out here; 2 processes x 1 micro-batch and 1 process x grad_accum 2 are the same run; another global batch, or a
    warmup fraction, is not."""
    import json

    old = {"steps": 1000, "time_budget_s": 0.0, "lr": 1e-3, "min_lr_ratio": 0.1, "warmup_steps": 50,
           "weight_decay": 0.1, "grad_clip": 1.0, "precision": "fp32", "seed": 0, "checkpoint_every_s": 60.0,
           "log_every": 10, "max_nonfinite_steps": 20}
    assert _run_key(TrainConfig(), 1, {"run": "a"}) == json.dumps({"train": old, "run": "a"}, sort_keys=True)
    assert _run_key(TrainConfig(warmup_fraction=0.1), 1, None) != _run_key(TrainConfig(), 1, None)
    assert _run_key(TrainConfig(grad_accum=2), 1, None) == _run_key(TrainConfig(), 2, None)
    assert _run_key(TrainConfig(grad_accum=2), 2, None) != _run_key(TrainConfig(grad_accum=2), 1, None)


def test_a_warmup_fraction_gives_one_schedule_shape_at_any_budget():
    """``warmup_fraction``: the same share of the steps warms up at every budget, so the learning rate at a given
    share of a run is the same for a short run and a long one (``warmup_steps`` stays the default)."""
    short, long = TrainConfig(steps=200, warmup_fraction=0.1), TrainConfig(steps=800, warmup_fraction=0.1)
    assert (short.warmup, long.warmup, TrainConfig(steps=200).warmup) == (20, 80, 50)
    for share in (0.1, 0.3, 0.7, 0.99):  # the decay after the warmup: the same at the same share of the run
        assert learning_rate(short, round(share * 200), 0) == pytest.approx(learning_rate(long, round(share * 800), 0))
    assert learning_rate(short, 19, 0) == learning_rate(long, 79, 0) == pytest.approx(short.lr)  # warm at 10%
    with pytest.raises(DraftcountError, match=r"warmup_fraction must be in \[0, 1\), got 1.5"):
        TrainConfig(warmup_fraction=1.5)
