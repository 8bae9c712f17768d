"""What the conformance suite does not see of the model-free methods (`pld`, `stand`, `reader`, `suffix`): that they
draft what they should, keep the state they should (`suffix`: its global tree carries a request's output to the
requests after it, not a warm-up's, and not with ``max_cached_requests: 0``), and that the enumeration test catches
a wrong STAND q."""

from __future__ import annotations

import json

import pytest
import torch

from harness import SamplingConfig, generate, wrap_model
from harness.data.token_streams import save_tokens
from harness.engine.adapter import WARM_UP_KEY
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec
from harness.errors import DraftcountError
from harness.measure.calibrations import static_tree
from harness.retrieval.datastore import build_datastore, save_datastore
from harness.training.drafters import DrafterTrainRequest
from harness.verify.sampling import make_generator
from tests.helpers import (
    build_tokenizer, chi_square_pvalue, exact_distribution, make_llama, markov_batches, markov_llama,
    sampled_distribution, save_model_dir, train_briefly,
)

GREEDY = SamplingConfig()


@pytest.fixture(scope="module")
def markov_target():
    return wrap_model(markov_llama())


def _prompts(count: int = 20) -> list[torch.Tensor]:
    return [row[None] for row in next(markov_batches(48, count, 12, seed=11))]


def test_pld_drafts_the_continuation_of_a_repeated_pattern(markov_target):
    adapter, _ = build_adapter("pld", {"max_draft": 4}, BuildInputs(markov_target, None, None))
    prompt = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 1, 2, 3]])
    result = generate(markov_target, adapter, prompt, 1, GREEDY)  # prefill only: no step yet
    sequence = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 1, 2, 3]])
    adapter.begin(None, prompt, None)
    tree = adapter.propose(type("Ctx", (), {"counters": result.counters, "tokens": sequence[0].tolist()})(), sequence)
    assert tree.tokens.tolist() == [3, 4, 5, 6, 7] and tree.parents == (-1, 0, 1, 2, 3)


@pytest.mark.parametrize("method", ["pld", "stand", "reader", "suffix"])
def test_greedy_equals_ar_on_20_prompts_and_drafts_cost_no_flops(markov_target, method):
    ar, _ = build_adapter("ar", {}, BuildInputs(markov_target, None, None))
    adapter, _ = build_adapter(method, {}, BuildInputs(markov_target, None, None))
    accepted = 0
    for prompt in _prompts():
        result = generate(markov_target, adapter, prompt, 40, GREEDY)
        assert result.output_ids == generate(markov_target, ar, prompt, 40, GREEDY).output_ids
        assert result.counters.drafter.flops == 0 and result.counters.drafter.forwards == 0
        accepted += result.counters.accepted_tokens
    assert accepted > 0


def test_stand_keeps_its_store_across_samples_of_one_prompt_only(markov_target):
    adapter, _ = build_adapter("stand", {}, BuildInputs(markov_target, None, None))
    prompt = _prompts(1)[0]
    sampling = SamplingConfig(1.0)
    starts = []
    for key in ["a", "a", "a", "b"]:
        result = generate(markov_target, adapter, prompt, 24, sampling, generator=make_generator(len(starts), "cpu"),
                          prompt_key=key)
        starts.append(result.counters.extra["store_entries_at_start"])
    assert starts[0] == 0 and 0 < starts[1] < starts[2] and starts[3] == 0
    fresh, _ = build_adapter("stand", {"keep_store": "generation"}, BuildInputs(markov_target, None, None))
    for seed in range(2):
        result = generate(markov_target, fresh, prompt, 24, sampling, generator=make_generator(seed, "cpu"),
                          prompt_key="a")
        assert result.counters.extra["store_entries_at_start"] == 0


def test_stand_samples_distinct_siblings_at_temperature_one(markov_target):
    adapter, _ = build_adapter("stand", {"keep_store": "run"}, BuildInputs(markov_target, None, None))
    widest = 0
    for seed, prompt in enumerate(_prompts(6)):
        generate(markov_target, adapter, prompt, 32, SamplingConfig(1.0), generator=make_generator(seed, "cpu"))
    prompt = _prompts(1)[0]
    tree = adapter.propose(
        type("Ctx", (), {"sampling": SamplingConfig(1.0), "generator": make_generator(9, "cpu"),
                         "target_vocab_size": 48, "tokens": prompt[0].tolist()})(), prompt)
    root_children = [node for node, parent in enumerate(tree.parents) if parent == 0]
    widest = len(root_children)
    assert widest >= 2 and len({int(tree.tokens[node]) for node in root_children}) == widest
    second = tree.draft_probs[root_children[1]]
    assert float(second[tree.tokens[root_children[0]]]) == 0.0 and float(second.sum()) == pytest.approx(1.0)


@pytest.mark.parametrize("reduced", [True, False])
def test_the_enumeration_test_catches_an_unreduced_stand_q(monkeypatch, reduced):
    """The store pinned to a q far from the target's p, three distinct children per node: lossless with
    the reduced q of later siblings; caught when they are verified against the full stored q instead."""
    import methods.stand.adapter as stand_adapter
    from harness.retrieval.ngram_store import StoredDistribution

    target = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=0, init_range=0.5))
    if not reduced:
        full = stand_adapter.reduced_distribution
        monkeypatch.setattr(stand_adapter, "reduced_distribution",
                            lambda tokens, probs, removed, vocab, device: full(tokens, probs, set(), vocab, device))
    adapter, _ = build_adapter("stand", {"branching": [3, 3, 3], "max_n": 1, "keep_store": "run"},
                               BuildInputs(target, None, None))
    adapter.store_owner = "run"  # the pinned store below is this run's: begin() keeps it
    adapter.store.entries = {(token,): StoredDistribution([1, 2, 5, 0, 3], [0.9, 0.04, 0.03, 0.02, 0.01],
                                                          visits=10**12) for token in range(6)}
    sampling = SamplingConfig(1.0)
    exact = exact_distribution(target, [1, 2, 3], 2, sampling)
    pvalue = chi_square_pvalue(sampled_distribution(target, adapter, [1, 2, 3], 2, sampling, 1500, seed=0), exact)
    assert (pvalue > 1e-3) if reduced else (pvalue < 1e-3)


@pytest.fixture(scope="module")
def reader_inputs(tmp_path_factory, markov_target):
    root = tmp_path_factory.mktemp("reader")
    markov_target.model.save_pretrained(root / "target")
    tokens = torch.cat([next(markov_batches(48, 32, 48, seed=5)).flatten() for _ in range(2)])
    save_tokens(root / "tokens.pt", tokens)
    method_spec("eagle").train(DrafterTrainRequest(method="eagle", target=str(root / "target"),
                                                   data=root / "tokens.pt", out=root / "eagle", steps=40,
                                                   progress=False, options={"seq_len": "48", "batch_size": "8"}))
    save_datastore(root / "store.pt", build_datastore(tokens.numpy(), 4, "markov"))
    return {"head": str(root / "eagle"), "datastore": str(root / "store.pt")}


def test_reader_with_a_head_and_a_datastore_is_greedy_lossless_and_grafts(markov_target, reader_inputs):
    ar, _ = build_adapter("ar", {}, BuildInputs(markov_target, None, None))
    adapter, _ = build_adapter("reader", reader_inputs, BuildInputs(markov_target, None, None))
    retrieved = 0
    for prompt in _prompts():
        result = generate(markov_target, adapter, prompt, 32, GREEDY)
        assert result.output_ids == generate(markov_target, ar, prompt, 32, GREEDY).output_ids
        retrieved += result.counters.extra.get("accepted_retrieved", 0)
        assert result.counters.drafter.forwards > 0  # the head drafted too
    assert retrieved > 0


def test_reader_with_a_head_keeps_the_target_distribution(reader_inputs, tmp_path):
    target = wrap_model(make_llama(vocab=48, hidden=16, layers=1, heads=2, seed=0, init_range=1.0))
    target.model.save_pretrained(tmp_path / "target")
    save_tokens(tmp_path / "tokens.pt", torch.randint(0, 48, (2048,), generator=torch.Generator().manual_seed(0)))
    method_spec("eagle").train(DrafterTrainRequest(method="eagle", target=str(tmp_path / "target"),
                                                   data=tmp_path / "tokens.pt", out=tmp_path / "eagle", steps=0,
                                                   progress=False, options={"seq_len": "32"}))
    store = build_datastore(torch.tensor([1, 2, 3, 4, 5] * 40).numpy(), 3, "loop")
    save_datastore(tmp_path / "store.pt", store)
    adapter, _ = build_adapter("reader", {"head": str(tmp_path / "eagle"), "datastore": str(tmp_path / "store.pt"),
                                          "head_budget": 6, "head_depth": 2}, BuildInputs(target, None, None))
    sampling = SamplingConfig(1.0)
    exact = exact_distribution(target, [1, 2, 3], 2, sampling)
    counts = sampled_distribution(target, adapter, [1, 2, 3], 2, sampling, 1500, seed=0)
    assert chi_square_pvalue(counts, exact) > 1e-3


def test_static_tree_measurement_writes_a_tree_stand_runs(tmp_path):
    tokenizer = build_tokenizer(300)
    target_dir = save_model_dir(tmp_path / "target", train_briefly(make_llama(vocab=len(tokenizer), seed=1), 30),
                                tokenizer)
    prompts = tmp_path / "calibration.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "turns": [f"def f{i}(x):\n    return x + x + x"]}) + "\n"
                               for i in range(3)))
    out = tmp_path / "tree.json"
    assert static_tree.main(["--target", str(target_dir), "--prompts", str(prompts), "--opt", "branching=3,2,2,1,1",
                             "--nodes", "5", "--max-new-tokens", "24", "--out", str(out), "--no-progress"]) == 0
    saved = json.loads(out.read_text())
    assert 1 <= saved["budget"] <= 5 and len(saved["start_acceptances"]) == len(saved["start_shape"])
    adapter, _ = build_adapter("stand", {"tree_file": str(out)}, BuildInputs(wrap_model(make_llama(vocab=300)),
                                                                               None, None))
    assert adapter.max_draft_nodes == saved["budget"]


def _repeat_twice(target, options: dict, first_key: str = "a") -> tuple:
    """One prompt answered twice by one adapter (as two requests of a run), and `ar`'s answer."""
    adapter, _ = build_adapter("suffix", options, BuildInputs(target, None, None))
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    prompt = next(markov_batches(48, 1, 10, seed=3))[:1]
    first = generate(target, adapter, prompt, 40, GREEDY, prompt_key=first_key)
    second = generate(target, adapter, prompt, 40, GREEDY, prompt_key="b")
    return first, second, generate(target, ar, prompt, 40, GREEDY)


def test_a_repeated_request_drafts_the_earlier_output_from_the_global_tree(markov_target):
    first, second, ar = _repeat_twice(markov_target, {})
    assert first.output_ids == second.output_ids == ar.output_ids
    assert second.counters.extra["suffix_cached_requests"] == 1 and second.counters.extra["suffix_global_drafts"] > 0
    assert second.counters.tokens_per_forward > max(2.0 * first.counters.tokens_per_forward, 4.0)


@pytest.mark.parametrize("case", ["warm-up", "no global tree"])
def test_warm_ups_and_max_cached_requests_0_leave_the_next_request_alone(markov_target, case):
    options, key = ({}, WARM_UP_KEY) if case == "warm-up" else ({"max_cached_requests": 0}, "a")
    first, second, _ = _repeat_twice(markov_target, options, key)
    assert "suffix_global_drafts" not in second.counters.extra
    assert second.counters.step_accepted == first.counters.step_accepted


@pytest.mark.parametrize("options, message", [({"max_depth": 1}, "max_depth"), ({"min_token_prob": 2}, "min_token_prob"),
                                              ({"max_cached_requests": -2}, "max_cached_requests")])
def test_bad_options_are_one_line(markov_target, options, message):
    with pytest.raises(DraftcountError, match=message) as error:
        build_adapter("suffix", options, BuildInputs(markov_target, None, None))
    assert "\n" not in str(error.value)


def test_suffix_table_from_records(tmp_path):
    from harness.analysis.summary import records_frame
    from harness.store.records import SCHEMA_VERSION
    from methods.suffix.view import suffix_table

    def record(pair: str, steps: int, extra: dict) -> dict:
        return {"schema_version": SCHEMA_VERSION, "method": "suffix", "variant": "suffix_edits", "role": "method",
                "compared_method": "suffix", "dataset": "stdlib_edits", "sampling": {"temperature": 0.0},
                "pair_id": pair, "prompt_tokens": 4,
                "counters": {"new_tokens": 10, "wall_seconds": 1.0, "accepted_tokens": 4, "drafted_tokens": 8,
                             "step_accepted": [1] * steps, "accepted_by_depth": [],
                             "target": {"forwards": steps + 1, "tokens": 20, "flops": 1.0},
                             "drafter": {"forwards": 0, "tokens": 0, "flops": 0.0}, "extra": extra, "trace": {}}}

    path = tmp_path / "suffix.jsonl"
    rows = [record("a#0", 4, {"suffix_cached_requests": 0, "suffix_request_drafts": 3, "suffix_match_tokens": 6}),
            record("b#0", 6, {"suffix_cached_requests": 1, "suffix_global_drafts": 5, "suffix_request_drafts": 1,
                              "suffix_match_tokens": 24})]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    table = suffix_table(records_frame([path])).iloc[0]
    assert table.steps == 10 and table.global_share == pytest.approx(0.5) and table.request_share == pytest.approx(0.4)
    assert table.no_draft_share == pytest.approx(0.1) and table.mean_match_tokens == pytest.approx(30 / 9)
    assert table.mean_cached_requests == pytest.approx(0.5)
