"""`mtp`: the default drafts a chain of 3 from the chained modules, draft step k runs module ((k - 1) mod M), training
beats fresh modules and keeps `ar`'s output, bad options are one-line errors."""

import pytest
import torch

from harness import SamplingConfig
from harness.backend.models import load_model
from harness.engine.adapter import NoDrafts
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.training.drafters import DrafterTrainRequest
from methods.mtp.head import load_mtp
from methods.mtp.training import train_mtp
from tests.helpers import markov_batches, save_markov_target

GREEDY = SamplingConfig()


@pytest.fixture(scope="module")
def mtp_setup(tmp_path_factory):
    """A briefly trained Markov-language target; one-module MTP drafters trained and fresh, and a fresh two-module
    one."""
    root = tmp_path_factory.mktemp("mtp")
    save_markov_target(root, layers=3)
    metrics = {}
    for name, steps, modules in [("trained", 60, 1), ("fresh", 0, 1), ("two", 0, 2)]:
        request = DrafterTrainRequest(method="mtp", target=str(root / "target"), data=root / "tokens.pt",
                                      out=root / name, steps=steps, progress=False, heldout=root / "tokens.pt",
                                      options={"seq_len": "32", "batch_size": "8", "lr": "3e-3",
                                               "modules": str(modules)})
        metrics[name] = train_mtp(request)
    return load_model(str(root / "target"), with_tokenizer=False), root, metrics


def test_training_beats_fresh_modules_and_the_default_chain_keeps_ar_output(mtp_setup):
    target, root, metrics = mtp_setup
    trained, fresh = (metrics[name]["heldout_top1_agreement_by_step"] for name in ("trained", "fresh"))
    assert len(trained) == 3 and trained[0] > fresh[0] + 0.2, (trained, fresh)
    adapter, _ = build_adapter("mtp", {}, BuildInputs(target, None, root / "trained"))
    assert (adapter.shape.top_k, adapter.shape.depth, adapter.max_draft_nodes) == (1, 3, 3)
    accepted = 0
    for prompt in [row[None] for row in next(markov_batches(48, 4, 10, seed=7))]:
        result = generate(target, adapter, prompt, 24, GREEDY)
        assert result.output_ids == generate(target, NoDrafts(), prompt, 24, GREEDY).output_ids
        assert max(result.counters.step_accepted) <= 3  # a chain of 3
        accepted += result.counters.accepted_tokens
        assert 0 < result.counters.extra.get("drafter_useful_flops", 0) <= result.counters.drafter.flops
    assert accepted > 4 * 24 * 0.2


def test_draft_steps_cycle_through_the_modules(mtp_setup):
    target, root, _ = mtp_setup
    head = load_mtp(root / "two", target.model)
    assert head.module_count == 2 and [head.module_index(step) for step in range(1, 6)] == [0, 1, 0, 1, 0]
    features = torch.randn(1, 4, target.config.hidden_size)
    tokens, positions = torch.randint(48, (1, 4)), torch.arange(4)[None]
    with torch.no_grad():
        one, two, three = (head(features, tokens, positions, step=step) for step in (1, 2, 3))
    torch.testing.assert_close(one, three)
    assert not torch.allclose(one, two)  # the two modules were initialised apart
    adapter, _ = build_adapter("mtp", {"top_k": 2, "depth": 4, "budget": 8}, BuildInputs(target, None, root / "two"))
    prompt = next(markov_batches(48, 1, 10, seed=3))[:1]
    assert generate(target, adapter, prompt, 16, GREEDY).output_ids == generate(target, NoDrafts(), prompt, 16,
                                                                                 GREEDY).output_ids


@pytest.mark.parametrize("options, message", [({"modules": "0"}, "modules >= 1"),
                                              ({"objective": "gto"}, "token-level objective")])
def test_bad_training_options_are_one_line(mtp_setup, tmp_path, options, message):
    _, root, _ = mtp_setup
    request = DrafterTrainRequest(method="mtp", target=str(root / "target"), data=root / "tokens.pt",
                                  out=tmp_path / "out", steps=0, progress=False, options=options)
    with pytest.raises(DraftcountError, match=message) as error:
        train_mtp(request)
    assert "\n" not in str(error.value)
