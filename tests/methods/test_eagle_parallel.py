"""`eagle` with `parallel` (P-EAGLE): mask slots see what drafting shows them, training teaches them, one head
forward drafts a chain of k that keeps `ar`'s output and the target's law, and a head without mask inputs is
refused."""

import pytest
import torch

from harness import SamplingConfig
from harness.engine.adapter import NoDrafts
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.training.features import FeatureSpec
from methods.eagle.checkpoint import load_head, save_head
from methods.eagle.head import new_head
from methods.eagle.parallel import block_outputs
from tests.helpers import (chi_square_pvalue, exact_distribution, make_llama, markov_batches,
                           sampled_distribution, save_greedy_markov_target, train_test_drafter)
from tests.methods.conformance import ALPHA, SAMPLES, build_small_vocab_zoo

GREEDY = SamplingConfig()


def test_each_mask_block_sees_its_prefix_only():
    target = make_llama(vocab=32, hidden=16, layers=1, heads=2, seed=0, init_range=0.5)
    head = new_head(target, FeatureSpec("none", ("last",)), seed=1)
    head.enable_parallel()
    with torch.no_grad():
        head.mask_feature.normal_()  # not zero: a feature the test can see
    generator = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(32, (2, 13), generator=generator), "last": torch.randn(2, 13, 16,
                                                                                              generator=generator)}
    with torch.no_grad():
        outputs, layout = block_outputs(head, batch, [2, 6], 4)
        tokens, features = batch["input_ids"][:, 1:], batch["last"][:, :-1]
        assert torch.allclose(outputs[:, :12], head(features, tokens, torch.arange(12)[None]), atol=1e-5)
        for block, anchor in enumerate([2, 6]):  # the anchor's pairs, then 3 mask slots after them, alone
            count = anchor + 1
            alone = head(torch.cat([features[:, :count], features.new_zeros(2, 3, 16)], dim=1),
                         torch.cat([tokens[:, :count], tokens.new_zeros(2, 3)], dim=1),
                         torch.arange(count + 3)[None], masks=3)
            assert torch.allclose(outputs[:, 12 + 3 * block: 15 + 3 * block], alone[:, count:], atol=1e-5)


@pytest.fixture(scope="module")
def parallel_setup(tmp_path_factory):
    """A Markov target and its greedy text (later drafts cannot see earlier ones: the text they can learn to
    draft); an EAGLE head, and P-EAGLE heads fine-tuned from it with and without training steps."""
    root = tmp_path_factory.mktemp("p-eagle")
    target = save_greedy_markov_target(root)
    train_test_drafter("eagle", root, "eagle", 120)
    options = {"init": str(root / "eagle"), "parallel": "4", "anchors": "8"}
    metrics = {name: train_test_drafter("eagle", root, name, steps, heldout=True, **options)
               for name, steps in [("parallel", 80), ("untrained", 0)]}
    return target, root, metrics


def test_training_teaches_the_masks_and_one_forward_drafts_k_tokens(parallel_setup):
    target, root, metrics = parallel_setup
    trained, untrained = (metrics[name]["heldout_top1_agreement_by_step"] for name in ("parallel", "untrained"))
    assert len(trained) == 4 and sum(trained[1:]) > sum(untrained[1:]) + 0.2, (trained, untrained)
    assert load_head(root / "parallel", target.model).parallel
    adapter, _ = build_adapter("eagle", {"parallel": 4}, BuildInputs(target, None, root / "parallel"))
    accepted = 0
    for prompt in [row[None] for row in next(markov_batches(48, 4, 10, seed=7))]:
        result = generate(target, adapter, prompt, 24, GREEDY)
        assert result.output_ids == generate(target, NoDrafts(), prompt, 24, GREEDY).output_ids
        assert result.counters.drafter.forwards == len(result.counters.step_accepted)  # one forward a step
        assert max(result.counters.step_accepted) <= 4
        accepted += result.counters.accepted_tokens
        assert 0 < result.counters.extra.get("drafter_useful_flops", 0) <= result.counters.drafter.flops
    assert accepted > 4 * 24 * 0.3


def test_sampled_distribution_equals_the_target(tmp_path):
    """The sampling enumeration (the conformance suite's check) on the 6-token zoo, with a fresh P-EAGLE head."""
    zoo = build_small_vocab_zoo(tmp_path)
    drafter = tmp_path / "p-eagle"
    from harness.engine.method_spec import method_spec
    from harness.training.drafters import DrafterTrainRequest
    method_spec("eagle").train(DrafterTrainRequest(method="eagle", target=str(zoo.root / "target"),
                                                   data=zoo.root / "tokens.pt", out=drafter, steps=0, progress=False,
                                                   options={"seq_len": "48", "parallel": "3"}))
    head = load_head(drafter, zoo.target.model)
    with torch.no_grad():  # mask inputs unlike the pairs' (a fresh head starts them near the mean): masks that draft
        generator = torch.Generator().manual_seed(3)  # laws of their own, which a wrong carried q would show
        head.mask_feature.copy_(torch.randn(head.mask_feature.shape, generator=generator) * 3)
        head.mask_embedding.copy_(torch.randn(head.mask_embedding.shape, generator=generator) * 3)
    save_head(head, drafter, {})
    adapter, _ = build_adapter("eagle", {"parallel": 3}, BuildInputs(zoo.target, None, drafter))
    sampling = SamplingConfig(1.0)
    counts = sampled_distribution(zoo.target, adapter, [1, 2, 3], 3, sampling, SAMPLES, seed=0)
    assert chi_square_pvalue(counts, exact_distribution(zoo.target, [1, 2, 3], 3, sampling)) > ALPHA


def test_a_head_without_mask_inputs_and_bad_values_are_refused(parallel_setup):
    target, root, _ = parallel_setup
    with pytest.raises(DraftcountError, match="needs a head trained for it"):
        build_adapter("eagle", {"parallel": 4}, BuildInputs(target, None, root / "eagle"))
    with pytest.raises(DraftcountError, match="'parallel' of method 'eagle'"):
        build_adapter("eagle", {"parallel": 1}, BuildInputs(target, None, root / "parallel"))
    with pytest.raises(DraftcountError, match="one request at a time"):
        build_adapter("eagle", {"parallel": 4}, BuildInputs(target, None, root / "parallel"))[0].batch_row()
    with pytest.raises(DraftcountError, match="fusion none and the token objective"):
        train_test_drafter("eagle", root, "bad", 0, fusion="eagle3", parallel="4")
