"""Host-synchronisation audit: the counter tells host-made from device-made tensors and counts what would make a GPU
wait (reads of device values, blocking host-to-device copies, implicit copies); each method's step makes the counts
below."""

import pytest
import torch

from harness import SamplingConfig, generate
from harness.training.drafters import DrafterTrainRequest
from harness.measure.diagnostics.host_sync import HostReadCounter, audit_generation
from harness.data.token_streams import save_tokens
from harness.backend.models import load_model
from harness.engine.runtime import EngineOptions, EngineRuntime
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from tests.helpers import make_llama

PROMPT = torch.randint(0, 48, (1, 9), generator=torch.Generator().manual_seed(3))
DEVICE = torch.device("cpu")  # an explicit device argument: what the audit takes for the accelerator


def operations(counter: HostReadCounter) -> dict[str, int]:
    return {operation: count for (_, operation), count in counter.counts.items()}


def test_counter_sees_reads_by_phase():
    counter = HostReadCounter()
    values = torch.arange(4)  # made before the counter: taken as device-made
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


def test_reads_of_host_made_tensors_are_free():
    with HostReadCounter() as counter:
        host = torch.tensor([3, 1, 2])
        host.tolist()
        host[1:].sum().item()
        int(host.argmax())
        bool((host * 2 > torch.zeros(3)).all())
        torch.randint(0, 9, (2,)).tolist()
        view, total = host[1:], host + 1
    assert counter.counts == {}
    assert counter.on_host(view) and counter.on_host(total)


def test_reads_of_device_tensors_are_counted():
    layer = torch.nn.Linear(3, 2)  # weights made before the counter: device-made
    with HostReadCounter() as counter:
        out = layer(torch.ones(1, 3, device=DEVICE))
        out.argmax().item()
        positions = torch.arange(3, device=DEVICE)  # made on the device: no copy
        positions.tolist()
        positions.cpu().tolist()  # the copy to the host is the read; reading the copy is free
    assert operations(counter) == {"item": 1, "tolist": 1, "cpu": 1}
    assert not counter.on_host(out) and not counter.on_host(positions)


def test_blocking_host_to_device_copies_are_counted():
    with HostReadCounter() as counter:
        moved = torch.tensor([1, 2]).to(DEVICE)
        torch.tensor([1, 2], device=DEVICE)
        torch.as_tensor([1, 2], device=DEVICE)
        buffer = torch.zeros(2, device=DEVICE)
        buffer.copy_(torch.tensor([1.0, 2.0]))
        buffer.new_tensor([3.0, 4.0])
        torch.tensor([], device=DEVICE)  # nothing to copy
        torch.tensor([1, 2]).to(torch.float64)  # no device: stays on the host
    assert operations(counter) == {"h2d:to": 1, "h2d:tensor": 1, "h2d:as_tensor": 1, "h2d:copy_": 1,
                                   "h2d:new_tensor": 1}
    assert not counter.on_host(moved)


def test_non_blocking_copies_are_not_counted():
    with HostReadCounter() as counter:
        host = torch.tensor([1, 2])
        moved = host.to(DEVICE, non_blocking=True)  # assumed pinned
        torch.zeros(2, device=DEVICE).copy_(host, non_blocking=True)
        host.tolist()  # still on the host
        moved.tolist()  # on the device
    assert operations(counter) == {"tolist": 1}
    assert moved is not host and counter.on_host(host) and not counter.on_host(moved)


def test_host_index_into_a_device_tensor_is_an_implicit_copy():
    with HostReadCounter() as counter:
        values = torch.arange(5, device=DEVICE)
        index = torch.tensor([0, 2])
        values[index]
        values[index] = 0
        values[1:3]  # python numbers: no tensor to copy
    assert operations(counter) == {"h2d:implicit:__getitem__": 1, "h2d:implicit:__setitem__": 1}


def test_0_dim_host_tensors_are_scalars():
    with HostReadCounter() as counter:
        values = torch.arange(3, device=DEVICE)
        total = values + torch.tensor(2)
        values.masked_fill(values > 1, torch.tensor(0))
    assert counter.counts == {}
    assert not counter.on_host(total)


def test_where_records_the_source_line():
    with HostReadCounter(where=True) as counter:
        torch.tensor([1]).to(DEVICE)
    [(key, sites)] = counter.sites.items()
    [site] = sites
    assert key == ("engine", "h2d:to")
    assert site.startswith("tests/measure/diagnostics/test_host_sync.py:") and "torch.tensor([1]).to(DEVICE)" in site


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
@pytest.mark.parametrize("method,options", [("ar", {}), ("sd", {"gamma": 4}), ("tree_sd", {})])
def test_greedy_step_synchronises_once(random_pair, method, options, kv_cache):
    """ar, sd and tree_sd: the one host synchronisation of a greedy step is the verifier's read (the tree's tokens
    with the target's choices); masks, positions and indices built on the host go to the device without waiting."""
    target, draft = random_pair
    adapter, _ = build_adapter(method, options, BuildInputs(target, draft, None))
    runtime = EngineRuntime(target, EngineOptions(kv_cache=kv_cache))
    audit = audit_generation(target, adapter, PROMPT, 24, SamplingConfig(), runtime)
    assert audit.steps > 1
    assert audit.by_operation == {"verify:tolist": 1.0}


def test_audit_runs_on_the_runtime_itself(random_pair):
    """A cache the audited generation makes stays the runtime's (a later generation reuses it, and the graphs
    on it), not a copy's."""
    target, draft = random_pair
    adapter, _ = build_adapter("sd", {"gamma": 3}, BuildInputs(target, draft, None))
    runtime = EngineRuntime(target, EngineOptions(kv_cache="static"))
    audit_generation(target, adapter, PROMPT, 8, SamplingConfig(), runtime)
    made = runtime.static_cache
    assert made is not None
    generate(target, adapter, PROMPT, 8, SamplingConfig(), runtime=runtime)
    assert runtime.static_cache is made


def test_audit_labels_the_runtime_verify_forward_and_the_adapter_calls(random_pair):
    """A host read inside the runtime's verify forward counts as ``forward``, one inside propose or commit under
    its own name (per decoding step, prefill excluded). The value read was made before the audit: a device one."""
    target, draft = random_pair
    device_value = torch.ones(1)
    adapter, _ = build_adapter("sd", {"gamma": 3}, BuildInputs(target, draft, None))
    runtime = EngineRuntime(target, EngineOptions())
    for owner, name in ((runtime, "verify"), (adapter, "propose"), (adapter, "commit")):
        call = getattr(owner, name)

        def reading(*args, _call=call, **kwargs):
            device_value.item()
            return _call(*args, **kwargs)

        setattr(owner, name, reading)
    audit = audit_generation(target, adapter, PROMPT, 8, SamplingConfig(), runtime)
    assert {key: audit.by_operation[key] for key in ("forward:item", "propose:item", "commit:item")} == \
        {"forward:item": 1.0, "propose:item": 1.0, "commit:item": 1.0}


@pytest.fixture(scope="module")
def fresh_drafters(tmp_path_factory):
    root = tmp_path_factory.mktemp("sync")
    make_llama(vocab=48, hidden=32, layers=2, heads=4, seed=0).save_pretrained(root / "target")
    save_tokens(root / "tokens.pt", torch.randint(0, 48, (2048,), generator=torch.Generator().manual_seed(0)))
    for method in ("eagle", "lyanna"):
        method_spec(method).train(DrafterTrainRequest(method=method, target=str(root / "target"),
                                                     data=root / "tokens.pt", out=root / method, steps=0,
                                                     progress=False, options={"seq_len": "32"}))
    return load_model(str(root / "target"), with_tokenizer=False), root


@pytest.mark.parametrize("kv_cache", ["dynamic", "static"])
@pytest.mark.parametrize("method,options", [
    ("eagle", {"depth": 4}), ("lyanna", {"depth": 4}), ("lyanna", {"depth": 4, "reuse": "states", "overlap": "on"}),
    ("lyanna", {"depth": 4, "reuse": "states", "overlap": "on", "verify_fusion": "off"})])
def test_beam_tree_step_synchronises_once(fresh_drafters, method, options, kv_cache):
    """eagle and lyanna: the beam tree grows on the device and its shape reaches the host in the verifier's read;
    unfused verification reads the tree once more before it verifies (what verification fusion saves)."""
    target, root = fresh_drafters
    adapter, _ = build_adapter(method, options, BuildInputs(target, None, root / method))
    runtime = EngineRuntime(target, EngineOptions(kv_cache=kv_cache))
    audit = audit_generation(target, adapter, PROMPT, 16, SamplingConfig(), runtime)
    unfused = options.get("verify_fusion") == "off"
    assert audit.by_operation == ({"engine:tolist": 1.0, "verify:tolist": 1.0} if unfused else {"verify:tolist": 1.0})
