"""Distillation through the target's LM head over 'last' states: from the target's feature dump it gives the forward's
loss to the dump's rounding, from a token stream the forward's loss bit for bit."""

import torch

from harness.training.distill import distillation_step_loss, head_distillation_loss
from harness.training.features import FeatureSource, dump_features
from harness.training.loop import batches_from_step
from harness.training.zoo import kl_to_teacher
from tests.helpers import make_llama


def forward_distillation_loss(student, target, windows, temperature):
    """The reference: the whole target's logits on ``windows``."""
    with torch.no_grad():
        teacher = target(input_ids=windows).logits
    return kl_to_teacher(teacher, student(input_ids=windows).logits, temperature)


def test_dump_distillation_equals_the_forward_on_the_same_windows(tmp_path):
    target = make_llama(vocab=40, hidden=16, layers=3, heads=2, seed=0).eval()
    student = make_llama(vocab=40, hidden=8, layers=1, heads=2, seed=1)
    tokens = torch.randint(0, 40, (1500,), generator=torch.Generator().manual_seed(2), dtype=torch.int32)
    dump_features(target, tokens, tmp_path / "dump", sequences=8, seq_len=16, layers=["last", 1], shard_size=4,
                  dtype="float32", seed=0)
    source = FeatureSource(["last"], 16, dump_dir=tmp_path / "dump")
    loss, positions = distillation_step_loss(student, target, source, step=3, seed=7, batch_size=4, temperature=2.0,
                                             device="cpu")
    batch = batches_from_step(3, 7, lambda generator: source.batch(4, generator))  # the step's own draws
    assert positions == 4 * 16
    torch.testing.assert_close(loss, forward_distillation_loss(student, target, batch["input_ids"], 2.0))
    torch.testing.assert_close(loss, head_distillation_loss(student, target, batch, 2.0))
    loss.backward()  # the student learns; the target does not
    assert all(parameter.grad is None for parameter in target.parameters())
    assert any(parameter.grad is not None for parameter in student.parameters())
    stream = FeatureSource(["last"], 16, target=target, tokens=tokens)
    stream_loss, stream_positions = distillation_step_loss(student, target, stream, 3, 7, 4, 1.0, "cpu")
    windows = batches_from_step(3, 7, lambda generator: stream.batch(4, generator))["input_ids"]
    assert stream_positions == 64
    assert torch.equal(stream_loss, forward_distillation_loss(student, target, windows, 1.0))  # the forward's bits
