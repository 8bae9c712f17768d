"""`lyanna`: lossless for every switch combination (greedy) and by enumeration (sampling, reuse=logits),
training beats a fresh drafter, reuse keeps drafter work, vocabulary compression, the backbone at the EAGLE head's
kind and width and the token-info rows over the draft vocabulary (the parameter counts on the zoo's and the real
target's shapes)."""

import json

import pytest
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM

from harness import SamplingConfig, wrap_model
from harness.engine.adapter import NoDrafts
from harness.training.drafters import DrafterTrainRequest
from harness.engine.loop import generate
from harness.errors import DraftcountError
from harness.backend.models import load_model
from harness.engine.method_spec import BuildInputs, build_adapter
from methods.lyanna.adapter import LyannaAdapter, LyannaOptions
from harness.store.drafter_meta import META_FILE
from harness.training.draft_vocab import sized_vocab
from harness.training.drafter_contract import parameter_components
from harness.training.features import FeatureSpec
from methods.eagle.head import new_head
from methods.lyanna.model import LyannaArch, load_drafter, new_drafter, save_drafter
from methods.lyanna.training import train_lyanna
from tests.helpers import (
    ROOT,
    ENGINE_SWITCHES, chi_square_pvalue, engine_runtime, exact_distribution, make_llama, markov_batches,
    sampled_distribution, save_markov_target,
)

REUSE = ["off", "logits", "states"]


@pytest.fixture(scope="module")
def lyanna_setup(tmp_path_factory):
    """A briefly trained Markov-language target (saved) and drafters: token_info / feature injection, with and
    without vocabulary compression (trained briefly), and a fresh one."""
    root = tmp_path_factory.mktemp("lyanna")
    save_markov_target(root, layers=3)
    metrics = {}
    for name, steps, extra in [("fresh", 0, {}), ("token_info", 80, {}), ("feature", 60, {"inject": "feature"}),
                               ("token_info_vocab", 60, {"vocab_fraction": "0.5"}),
                               ("feature_vocab", 40, {"inject": "feature", "vocab_fraction": "0.5"})]:
        request = DrafterTrainRequest(
            method="lyanna", target=str(root / "target"), data=root / "tokens.pt", out=root / name, steps=steps,
            progress=False, heldout=root / "tokens.pt",
            options={"seq_len": "48", "batch_size": "8", "lr": "3e-3", "unroll_steps": "3", **extra})
        metrics[name] = train_lyanna(request)
    return load_model(str(root / "target"), with_tokenizer=False), root, metrics


def _prompts(count, seed=7):
    return [row[None] for row in next(markov_batches(48, count, 10, seed))]


# every valid (reuse, verify_fusion, overlap): overlap runs states ahead, so it needs reuse=states
SWITCHES = [(reuse, fusion, "off") for reuse in REUSE for fusion in ("on", "off")]
SWITCHES += [("states", fusion, "on") for fusion in ("on", "off")]
SHAPES = [(4, 5, 24), (2, 3, 5), (3, 4, 12)]


@pytest.mark.parametrize("drafter", ["token_info", "feature", "token_info_vocab", "feature_vocab"])
def test_greedy_lossless_every_switch(lyanna_setup, drafter):
    """inject x vocabulary compression (the drafters) x reuse x verification fusion x overlap, 12 prompts each."""
    target, root, _ = lyanna_setup
    prompts = _prompts(12)
    expected = [generate(target, NoDrafts(), prompt, 12, SamplingConfig()).output_ids for prompt in prompts]
    deep = 0
    for index, (reuse, fusion, overlap) in enumerate(SWITCHES):
        top_k, depth, budget = SHAPES[index % len(SHAPES)]
        options = {"reuse": reuse, "verify_fusion": fusion, "overlap": overlap, "top_k": top_k, "depth": depth,
                   "budget": budget}
        adapter, _ = build_adapter("lyanna", options, BuildInputs(target, None, root / drafter))
        for prompt, want in zip(prompts, expected):
            result = generate(target, adapter, prompt, 12, SamplingConfig())
            assert result.output_ids == want, (drafter, options)
            deep += sum(result.counters.accepted_by_depth[1:])
    assert deep > 0



@pytest.mark.parametrize("switch", list(ENGINE_SWITCHES))
def test_greedy_lossless_under_engine_switches(lyanna_setup, switch):
    """Static KV caches (target and backbone: kept states go back in place) and the CUDA-graph path of the
    verify forward and the backbone's steps (its buffers, run eagerly), with state reuse and overlap."""
    target, root, _ = lyanna_setup
    runtime = engine_runtime(target, switch)
    deep = 0
    for options in ({}, {"reuse": "states", "overlap": "on"}, {"reuse": "states", "overlap": "on", "verify_fusion": "off"}):
        adapter, _ = build_adapter("lyanna", options, BuildInputs(target, None, root / "token_info"))
        backbone_forwards, target_forwards = 0, 0
        target_calls = runtime.graphs.calls if runtime.graphs is not None else 0
        for prompt in _prompts(8):
            want = generate(target, NoDrafts(), prompt, 12, SamplingConfig()).output_ids
            result = generate(target, adapter, prompt, 12, SamplingConfig(), runtime=runtime)
            assert result.output_ids == want, options
            deep += sum(result.counters.accepted_by_depth[1:])
            backbone_forwards += result.counters.drafter.forwards
            target_forwards += result.counters.target.forwards - 1  # the prefill is not graphed
        if switch == "graph_buffers":
            assert runtime.graphs_of(adapter).calls == backbone_forwards
            assert runtime.graphs.calls - target_calls == target_forwards  # unfused: both forwards of a step
            assert result.counters.extra.get("backbone_states_reused", 0) > 0 or not options
    assert deep > 0


@pytest.mark.parametrize("reuse", ["logits", "off"])
def test_the_graphed_draft_drafts_what_the_eager_draft_does(lyanna_setup, reuse):
    """methods/lyanna/graphed.py: the whole draft as one block (run eagerly on the CPU) accepts the same drafts at
    every step as the step-by-step draft on a static cache, and books the same drafter FLOPs, useful work and
    counters."""
    target, root, _ = lyanna_setup
    runs = {}
    for switch in ENGINE_SWITCHES:
        adapter, _ = build_adapter("lyanna", {"reuse": reuse}, BuildInputs(target, None, root / "token_info"))
        runtime = engine_runtime(target, switch)
        runs[switch] = [generate(target, adapter, prompt, 16, SamplingConfig(), runtime=runtime).counters
                        for prompt in _prompts(4)]
        if switch == "graph_buffers":
            assert any(key[0] == "block" for key in runtime.graphs_of(adapter).graphs)
    for eager, graphed in zip(runs["static"], runs["graph_buffers"]):
        assert graphed.step_accepted == eager.step_accepted
        assert graphed.extra == pytest.approx(eager.extra, rel=1e-12)  # the reuse counters, useful drafter FLOPs
        assert (graphed.drafter.forwards, graphed.drafter.tokens) == (eager.drafter.forwards, eager.drafter.tokens)
        assert graphed.drafter.flops == pytest.approx(eager.drafter.flops, rel=1e-12)


def test_fresh_drafter_lossless_and_training_helps(lyanna_setup):
    target, root, metrics = lyanna_setup
    prompts = _prompts(20, seed=8)
    taus = {}
    for name in ("fresh", "token_info"):
        adapter, _ = build_adapter("lyanna", {"reuse": "states"}, BuildInputs(target, None, root / name))
        taus[name] = 0.0
        for prompt in prompts:
            want = generate(target, NoDrafts(), prompt, 24, SamplingConfig()).output_ids
            result = generate(target, adapter, prompt, 24, SamplingConfig())
            assert result.output_ids == want
            taus[name] += result.counters.tokens_per_forward
    assert taus["token_info"] > 1.5 * taus["fresh"]
    agreement = metrics["token_info"]["heldout_top1_agreement_by_step"]
    assert len(agreement) == 3 and min(agreement) > 2 * max(metrics["fresh"]["heldout_top1_agreement_by_step"])


# the defaults (reuse=logits, fusion on, overlap off) are the conformance suite's lyanna case
@pytest.mark.parametrize("reuse,fusion,overlap", [("states", "off", "on")])
def test_sampling_lossless(reuse, fusion, overlap):
    target = wrap_model(make_llama(vocab=6, hidden=16, layers=1, heads=2, seed=0, init_range=1.0))
    drafter = new_drafter(target.model, LyannaArch(rank=4), None, seed=3)
    for parameter in drafter.parameters():
        parameter.data.normal_(0, 0.5)
    adapter = LyannaAdapter(drafter, target, LyannaOptions(top_k=2, depth=2, budget=4, reuse=reuse,
                                                                verify_fusion=fusion, overlap=overlap))
    sampling = SamplingConfig(1.0)
    exact = exact_distribution(target, [1, 2, 3], 3, sampling)
    counts = sampled_distribution(target, adapter, [1, 2, 3], 3, sampling, 2000, seed=0)
    assert chi_square_pvalue(counts, exact) > 1e-3


def test_reuse_keeps_drafter_work(lyanna_setup):
    """Against reuse=off, reuse throws away less drafter work per accepted token; states reuse also runs fewer
    backbone FLOPs."""
    target, root, _ = lyanna_setup
    totals = {}
    for reuse in REUSE:
        adapter, _ = build_adapter("lyanna", {"reuse": reuse}, BuildInputs(target, None, root / "token_info"))
        flops = useful = accepted = 0.0
        for prompt in _prompts(12, seed=9):
            counters = generate(target, adapter, prompt, 32, SamplingConfig()).counters
            flops += counters.drafter.flops
            useful += counters.extra["drafter_useful_flops"]
            accepted += counters.accepted_tokens
        totals[reuse] = ((flops - useful) / accepted, flops / accepted)
    assert totals["logits"][0] < totals["off"][0] and totals["states"][0] < totals["off"][0]
    assert totals["states"][1] < totals["off"][1]


def test_vocabulary_compression(lyanna_setup):
    _, _, metrics = lyanna_setup
    compressed = metrics["token_info_vocab"]
    assert compressed["kept_vocabulary"] == 24
    assert 0.5 <= compressed["heldout_vocabulary_coverage"] <= 1.0  # the kept half covers at least half the tokens


def test_token_info_rows_over_the_draft_vocabulary(lyanna_setup):
    """A drafter with a draft vocabulary has a token-info row per kept token and one shared by every other token;
    the components (backbone, injection) add up to its trainable parameters, as its metrics record them."""
    target, root, metrics = lyanna_setup
    drafter = load_drafter(root / "token_info_vocab", target.model)
    assert drafter.parent_embed.num_embeddings == 24 + 1
    kept = drafter.draft_vocab.token_map
    outside = [token for token in range(48) if token not in set(kept.tolist())]
    assert drafter.parent_rows[kept].tolist() == list(range(24)) and set(drafter.parent_rows[outside].tolist()) == {24}
    assert load_drafter(root / "token_info", target.model).parent_embed.num_embeddings == 48  # no draft vocabulary
    for name in ("token_info", "token_info_vocab", "feature"):
        components = metrics[name]["parameter_components"]
        assert set(components) == {"backbone", "injection"} and min(components.values()) > 0
        assert sum(components.values()) == metrics[name]["trainable_parameters"]


def test_backbone_is_the_eagle_heads_layer_at_its_width(lyanna_setup):
    """The backbone's decoder layer has the EAGLE head's parameters, name for name and shape for shape."""
    target, root, metrics = lyanna_setup
    drafter = load_drafter(root / "token_info", target.model)
    head = new_head(target.model, FeatureSpec("none", ("last",)), 0)
    assert {name: p.shape for name, p in drafter.layers.named_parameters()} == \
        {name: p.shape for name, p in head.layers.named_parameters()}
    assert metrics["token_info"]["backbone_intermediate_size"] == target.config.intermediate_size


def test_drafter_written_before_loads_with_its_own_layout(lyanna_setup, tmp_path):
    """A drafter whose metadata predates ``parent_vocab`` and ``backbone`` (a token-info row per target token, a
    Llama layer with an input norm) loads as it was trained."""
    target, _, _ = lyanna_setup
    old = new_drafter(target.model, LyannaArch(parent_vocab="full", backbone="llama"), sized_vocab(48, 24), 0)
    save_drafter(old, tmp_path / "old", {})
    meta_path = tmp_path / "old" / META_FILE
    meta = json.loads(meta_path.read_text())
    for key in ("parent_vocab", "backbone"):
        del meta["arch"][key]
    meta_path.write_text(json.dumps(meta))
    loaded = load_drafter(tmp_path / "old", target.model)
    assert loaded.parent_embed.num_embeddings == 48 and loaded.arch.backbone == "llama"
    assert not isinstance(loaded.layers[0].input_layernorm, torch.nn.Identity)


SMOLLM2 = {"vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
           "num_key_value_heads": 3, "intermediate_size": 1536, "tie_word_embeddings": True}
ZOO = {"vocab_size": 4096, "hidden_size": 256, "num_hidden_layers": 16, "num_attention_heads": 8,
       "num_key_value_heads": 8, "intermediate_size": 704, "tie_word_embeddings": False}


@pytest.mark.parametrize(("shape", "draft_vocab", "eagle", "lyanna"), [
    (SMOLLM2, 8192, 4_203_648, {"backbone": 3_871_872, "injection": 1_048_704}),  # GQA: 3 KV heads of 9
    (ZOO, 0, 934_400, {"backbone": 868_864, "injection": 524_352}),
])
def test_parameter_counts_on_the_configs_shapes(shape, draft_vocab, eagle, lyanna):
    """The main lyanna and eagle drafters' trainable parameters on the real target's shape (SmolLM2-135M, draft
    vocabulary 8,192) and the zoo's (workflow/config/default.yaml), counted on modules built without weights."""
    vocab = sized_vocab(shape["vocab_size"], draft_vocab)
    with torch.device("meta"):
        target_model = LlamaForCausalLM(LlamaConfig(**shape))
        head = new_head(target_model, FeatureSpec("none", ("last",)), 0, vocab)
        drafter = new_drafter(target_model, LyannaArch(), vocab, 0)
    assert head.trainable_parameters() == eagle
    assert parameter_components(drafter) == lyanna
    assert drafter.trainable_parameters() == sum(lyanna.values())
    assert drafter.config.intermediate_size == head.config.intermediate_size == shape["intermediate_size"]


def test_bad_inputs(lyanna_setup, tmp_path):
    target, root, _ = lyanna_setup
    with pytest.raises(DraftcountError, match="holds no lyanna drafter"):
        build_adapter("lyanna", {}, BuildInputs(target, None, tmp_path))
    with pytest.raises(DraftcountError, match="must be one of"):
        build_adapter("lyanna", {"reuse": "sometimes"}, BuildInputs(target, None, root / "fresh"))
    with pytest.raises(DraftcountError, match="overlap=on needs reuse=states"):
        build_adapter("lyanna", {"overlap": "on"}, BuildInputs(target, None, root / "fresh"))
    with pytest.raises(DraftcountError, match="vocab_fraction"):
        train_lyanna(DrafterTrainRequest(method="lyanna", target=str(root / "target"), data=root / "tokens.pt",
                                         out=tmp_path / "x", steps=0, options={"vocab_fraction": "1.5"}))


@pytest.mark.parametrize("options", [{"reuse": "states"}, {"reuse": "states", "overlap": "on"},
                                     {"reuse": "states", "overlap": "on", "overlap_steps": 3}])
def test_reused_and_run_ahead_states_keep_the_drafter_cache_aligned(lyanna_setup, options):
    """Every drafter KV entry sits at its own position: after each proposal the backbone's cache ends at the last
    state the chain holds (the state predicting position p is fed at slot p - 1), whether that state was computed,
    reused from the last round, or run ahead. A state run ahead twice used to be fed again at the cache's end, so
    the cache grew by a stale entry on every round that accepted little (and overran a static cache)."""
    target, root, _ = lyanna_setup
    adapter, _ = build_adapter("lyanna", options, BuildInputs(target, None, root / "fresh"))
    propose, checked = adapter.propose, []

    def checked_propose(ctx, sequence):
        tree = propose(ctx, sequence)
        checked.append((adapter.cache.get_seq_length(), max(adapter.chain.states)))
        return tree

    adapter.propose = checked_propose
    for temperature, prompt in zip((0.0, 1.0, 1.0), _prompts(3, seed=11)):
        generate(target, adapter, prompt, 40, SamplingConfig(temperature), generator=torch.Generator().manual_seed(0))
    assert len(checked) > 20 and all(length == last for length, last in checked), checked


@pytest.mark.parametrize("fusion", ["on", "off"])
def test_a_state_counts_as_useful_only_once_a_chain_drafts_with_it(fusion):
    """Drafter-FLOP accounting with states run ahead (overlap_steps 3, a random drafter at T = 1, so most rounds
    accept little): every backbone state whose FLOPs a round settles as useful is one a tree was drafted from,
    in that round or the next. A state run ahead past the next round's chain is carried undecided; it used to be
    counted useful at once, even when it was dropped before any chain used it."""
    target = wrap_model(make_llama(vocab=8, hidden=16, layers=1, heads=2, seed=0, init_range=1.0))
    drafter = new_drafter(target.model, LyannaArch(rank=4), None, seed=3)
    for parameter in drafter.parameters():
        parameter.data.normal_(0, 0.3)
    adapter = LyannaAdapter(drafter, target, LyannaOptions(top_k=2, depth=3, budget=5, reuse="states",
                                                           verify_fusion=fusion, overlap="on", overlap_steps=3))
    propose, commit = adapter.propose, adapter.commit
    drafted_from: dict[int, torch.Tensor] = {}  # the states some round's chain drafted with (kept alive: ids stay unique)
    settled: list[list[torch.Tensor]] = []  # per commit: the states it counted useful

    def tracking_propose(ctx, sequence):
        tree = propose(ctx, sequence)
        drafted_from.update((id(state), state) for p, state in adapter.chain.states.items() if p in adapter.depth_positions)
        return tree

    def tracking_commit(ctx, tree, verdict, target_out):
        work, chain = adapter.work, adapter.chain

        def recording_settle(counters, useful, carried=()):
            settled.append([chain.states[p] for kind, p in set(useful) if kind == "state" and p in chain.states])
            type(work).settle(work, counters, useful, carried)

        work.settle = recording_settle
        commit(ctx, tree, verdict, target_out)
        del work.settle

    adapter.propose, adapter.commit = tracking_propose, tracking_commit
    for seed in range(6):
        prompt = torch.randint(8, (1, 5), generator=torch.Generator().manual_seed(seed))
        generate(target, adapter, prompt, 40, SamplingConfig(1.0), generator=torch.Generator().manual_seed(seed))
        settled.pop()  # a generation's last round marks states for a round that never comes
    useful = [state for round_states in settled for state in round_states]
    assert len(useful) > 50 and all(id(state) in drafted_from for state in useful)


def training_positions(entry: dict) -> int:
    """A drafter entry's supervised target positions: its budget, or steps x batch x window."""
    options = entry["options"]
    return entry.get("budget_tokens") or entry["steps"] * options.get("batch_size", 8) * options.get("seq_len", 256)


@pytest.mark.parametrize("config", ["default.yaml", "smollm2.yaml"])
def test_lyanna_and_eagle_train_on_equal_positions(config):
    """The main comparison's two drafters see as many target positions (the claims rows' "equal training positions"),
    and lyanna's backbone is not narrowed (no intermediate_size: the target's MLP width, the EAGLE head's)."""
    drafters = yaml.safe_load((ROOT / "workflow" / "config" / config).read_text())["drafters"]
    assert training_positions(drafters["lyanna"]) == training_positions(drafters["eagle"])
    assert "intermediate_size" not in drafters["lyanna"]["options"]
