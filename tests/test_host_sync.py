"""Host-synchronisation audit: the counter sees host reads, and each method's step makes only the reads it needs."""

import pytest
import torch

from harness import SamplingConfig
from harness.drafter_training import DrafterTrainRequest
from harness.host_sync import HostReadCounter, audit_generation
from harness.lm_data import save_tokens
from harness.models import load_model
from harness.engine_runtime import EngineOptions, EngineRuntime
from methods import BuildInputs, build_adapter, get_method
from tests.helpers import make_llama

PROMPT = torch.randint(0, 48, (1, 9), generator=torch.Generator().manual_seed(3))


def test_counter_sees_reads_by_phase():
    counter = HostReadCounter()
    values = torch.arange(4)
    with counter:
        counter.phase = "propose"
        values.tolist()
        values[0].item()
        counter.phase = "verify"
        bool(values[1] > 0)
        int(values[2])
        values.sum()  # not a read
    assert counter.counts == {("propose", "tolist"): 1, ("propose", "item"): 1, ("verify", "__bool__"): 1,
                              ("verify", "__int__"): 1}


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
@pytest.mark.parametrize("method,options", [("ar", {}), ("sd", {"gamma": 4}), ("tree_sd", {})])
def test_greedy_step_reads_only_the_verdict(random_pair, method, options, kv_cache):
    """ar, sd and tree_sd: drafting, the target forward and the bookkeeping read nothing on the host; the one
    read per step is the verifier's (the tree's tokens with the target's choices)."""
    target, draft = random_pair
    adapter, _ = build_adapter(method, options, BuildInputs(target, draft, None))
    runtime = EngineRuntime(target, EngineOptions(kv_cache=kv_cache))
    audit = audit_generation(target, adapter, PROMPT, 24, SamplingConfig(), runtime)
    assert audit.steps > 1
    assert audit.by_operation == {"verify:tolist": 1.0}


@pytest.fixture(scope="module")
def fresh_drafters(tmp_path_factory):
    root = tmp_path_factory.mktemp("sync")
    make_llama(vocab=48, hidden=32, layers=2, heads=4, seed=0).save_pretrained(root / "target")
    save_tokens(root / "tokens.pt", torch.randint(0, 48, (2048,), generator=torch.Generator().manual_seed(0)))
    for method in ("eagle", "lyanna"):
        get_method(method).train(DrafterTrainRequest(method=method, target=str(root / "target"),
                                                     data=root / "tokens.pt", out=root / method, steps=0,
                                                     progress=False, options={"seq_len": "32"}))
    return load_model(str(root / "target"), with_tokenizer=False), root


@pytest.mark.parametrize("method,options", [("eagle", {"depth": 4}), ("lyanna", {"depth": 4}),
                                            ("lyanna", {"depth": 4, "reuse": "states", "overlap": "on"})])
def test_beam_tree_step_reads_only_the_verdict(fresh_drafters, method, options):
    """eagle and lyanna: the beam tree grows on the device; its shape reaches the host in the verifier's read."""
    target, root = fresh_drafters
    adapter, _ = build_adapter(method, options, BuildInputs(target, None, root / method))
    audit = audit_generation(target, adapter, PROMPT, 16, SamplingConfig())
    assert audit.by_operation == {"verify:tolist": 1.0}
