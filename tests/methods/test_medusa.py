"""`medusa`: Medusa heads draft from the newest accepted position's hidden state alone (one distribution per depth),
Hydra heads also from the drafted path; training beats fresh heads and keeps `ar`'s output; Hydra's heads keep the
target's distribution (the conformance suite samples Medusa's); Medusa's released layout reads as the heads it holds;
a tree deeper than the heads is a one-line error; static trees (Medusa's calibrated tree, a choices file) put each
head's named rank at each node and keep `ar`'s output."""

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from harness import SamplingConfig
from harness.backend.forward import LMOutput
from harness.backend.models import load_model
from harness.engine.adapter import NoDrafts, StepContext
from harness.engine.counters import GenerationCounters
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.training.drafters import DrafterTrainRequest
from methods.medusa.checkpoint import load_heads
from methods.medusa.checkpoint import CALIBRATION
from methods.medusa.training import train_medusa
from harness.trees.choices import calibrated_choices
from tests.helpers import (
    ENGINE_SWITCHES, assert_drafts_as_eager, chi_square_pvalue, engine_runtime, exact_distribution, markov_batches,
    sampled_distribution,
    save_markov_target,
)
from tests.methods.conformance import ALPHA, SAMPLES, build_small_vocab_zoo

GREEDY = SamplingConfig()
KINDS = {"medusa": {}, "hydra": {"hydra": "true"}}


@pytest.fixture(scope="module")
def medusa_setup(tmp_path_factory):
    """A briefly trained Markov-language target; Medusa and Hydra heads, trained and fresh (3 heads)."""
    root = tmp_path_factory.mktemp("medusa")
    save_markov_target(root, layers=3)
    metrics = {}
    for kind, extra in KINDS.items():
        for name, steps in [("trained", 60), ("fresh", 0)]:
            request = DrafterTrainRequest(method="medusa", target=str(root / "target"), data=root / "tokens.pt",
                                          out=root / f"{kind}-{name}", steps=steps, progress=False,
                                          heldout=root / "tokens.pt",
                                          options={"seq_len": "32", "batch_size": "8", "lr": "3e-2", "heads": "3",
                                                   **extra})
            metrics[f"{kind}-{name}"] = train_medusa(request)
    return load_model(str(root / "target"), with_tokenizer=False), root, metrics


def _expand_logprobs(adapter, target, hidden: torch.Tensor, sequence: torch.Tensor):
    """The tree the adapter drafts and the distributions it gave each expanded depth's frontier nodes."""
    ctx = StepContext(GREEDY, None, GenerationCounters(), target.vocab_size)
    adapter.begin(ctx, sequence[:, :-1], LMOutput(torch.zeros(1, hidden.shape[1], target.vocab_size), (hidden,)))
    seen = []
    original = adapter._head

    def recording(ctx, head, path, rows):
        out = original(ctx, head, path, rows)
        seen.append(out[0])
        return out

    adapter._head = recording
    tree = adapter.propose(ctx, sequence)
    tree.resolve()
    return tree, seen, ctx.counters


@pytest.mark.parametrize("kind", KINDS)
def test_medusa_heads_ignore_the_path_and_hydra_heads_read_it(medusa_setup, kind):
    target, root, _ = medusa_setup
    adapter, _ = build_adapter("medusa", {"top_k": 3, "depth": 3, "budget": 9}, BuildInputs(target, None,
                                                                                            root / f"{kind}-trained"))
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, 8, target.config.hidden_size, generator=generator)
    sequence = torch.randint(48, (1, 9), generator=generator)
    tree, seen, counters = _expand_logprobs(adapter, target, hidden, sequence)
    assert tree.size == 10 and max(tree.depths) <= 3
    depth_two = seen[1]  # head 2's distributions for the three depth-1 frontier nodes
    assert counters.drafter.forwards == 3  # one evaluation per head
    if kind == "medusa":
        assert [rows.shape[0] for rows in seen] == [1, 1, 1]  # one row per head: the path plays no part
    else:
        assert [rows.shape[0] for rows in seen] == [1, 3, 3]
        assert not torch.allclose(depth_two[0], depth_two[1])  # different paths, different children
    changed = hidden.clone()
    changed[:, :-1] = torch.randn(1, 7, target.config.hidden_size, generator=generator)
    assert _expand_logprobs(adapter, target, changed, sequence)[0].tokens.tolist() == tree.tokens.tolist()


@pytest.mark.parametrize("kind", KINDS)
def test_the_graphed_draft_drafts_what_the_eager_draft_does(medusa_setup, kind):
    """methods/medusa/graphed.py: the beam as one block (run eagerly on the CPU) under cuda_graphs=on accepts the
    same drafts at every step as the eager draft, keeps ar's output and books the same FLOPs and useful work."""
    target, root, _ = medusa_setup
    runs = {}
    for switch in ENGINE_SWITCHES:
        adapter, _ = build_adapter("medusa", {"top_k": 3, "depth": 3, "budget": 8},
                                   BuildInputs(target, None, root / f"{kind}-trained"))
        runtime = engine_runtime(target, switch)
        runs[switch] = [generate(target, adapter, prompt, 24, GREEDY, runtime=runtime)
                        for prompt in [row[None] for row in next(markov_batches(48, 4, 10, seed=7))]]
        if switch == "graph_buffers":
            assert any(key[0] == "block" for key in runtime.graphs_of(adapter).graphs)
    assert_drafts_as_eager(runs["static"], runs["graph_buffers"])


@pytest.mark.parametrize("kind", KINDS)
def test_training_beats_fresh_heads_and_keeps_ar_output(medusa_setup, kind):
    target, root, metrics = medusa_setup
    trained, fresh = (metrics[f"{kind}-{name}"]["heldout_top1_agreement_by_step"] for name in ("trained", "fresh"))
    losses = metrics[f"{kind}-trained"]["train"]["losses"]
    assert len(trained) == 3 and losses[-1] < 0.97 * losses[0]
    if kind == "hydra":  # a Medusa head cannot know the root its target drew, a Hydra head reads it
        assert trained[0] > fresh[0] + 0.12 and losses[-1] < metrics["medusa-trained"]["train"]["losses"][-1]
    adapter, _ = build_adapter("medusa", {"top_k": 3, "depth": 3, "budget": 8},
                               BuildInputs(target, None, root / f"{kind}-trained"))
    ar, accepted = NoDrafts(), 0
    for prompt in [row[None] for row in next(markov_batches(48, 4, 10, seed=7))]:
        result = generate(target, adapter, prompt, 24, GREEDY)
        assert result.output_ids == generate(target, ar, prompt, 24, GREEDY).output_ids
        accepted += result.counters.accepted_tokens
        assert 0 < result.counters.extra.get("drafter_useful_flops", 0) <= result.counters.drafter.flops
    assert accepted > 4 * 24 * (0.3 if kind == "hydra" else 0.1), accepted
    assert adapter.details["hydra"] == (kind == "hydra") and adapter.details["heads"] == 3


@pytest.mark.parametrize("kind", KINDS)
def test_static_choices_put_each_heads_named_rank_at_each_node_and_keep_ar_output(medusa_setup, kind, tmp_path):
    target, root, metrics = medusa_setup
    table = metrics[f"{kind}-trained"][CALIBRATION]
    assert len(table) == 3 and all(len(row) == 10 for row in table)
    assert [row[0] for row in table] == pytest.approx(metrics[f"{kind}-trained"]["heldout_top1_agreement_by_step"])
    inputs = BuildInputs(target, None, root / f"{kind}-trained")
    adapter, _ = build_adapter("medusa", {"choices": "calibrated", "depth": 3, "budget": 9}, inputs)
    assert adapter.static.choices == calibrated_choices(table, 9, 3).choices and adapter.max_draft_nodes == 9
    (tmp_path / "choices.json").write_text(json.dumps([[0], [1], [0, 0], [0, 0, 0], [0, 1], [1, 2]]))
    heads, embed, lm_head = adapter.heads, target.model.get_input_embeddings(), target.model.get_output_embeddings()
    for options in ({"choices": "calibrated", "depth": 3, "budget": 9}, {"choices": str(tmp_path / "choices.json")}):
        adapter, _ = build_adapter("medusa", options, inputs)
        generator = torch.Generator().manual_seed(1)
        hidden = torch.randn(1, 8, target.config.hidden_size, generator=generator)
        sequence = torch.randint(48, (1, 9), generator=generator)
        tree, seen, _ = _expand_logprobs(adapter, target, hidden, sequence)
        assert tree.parents == adapter.static.parents and tree.tokens[0] == sequence[0, -1]
        with torch.no_grad():
            for node, choice in enumerate(adapter.static.choices, start=1):
                path = embed(tree.tokens[tree.path_to(node)[:-1]])[None] if heads.arch.hydra else None
                logits = heads.logits(len(choice), heads.hidden(len(choice), hidden[0, -1][None], path), lm_head)
                assert tree.tokens[node] == logits[0].topk(choice[-1] + 1).indices[choice[-1]], (node, choice)
        rows = [len(level.parent_nodes) if kind == "hydra" else 1 for level in adapter.static.levels]
        assert [block.shape[0] for block in seen] == rows
        for prompt in [row[None] for row in next(markov_batches(48, 3, 10, seed=8))]:
            result = generate(target, adapter, prompt, 20, GREEDY)
            assert result.output_ids == generate(target, NoDrafts(), prompt, 20, GREEDY).output_ids
            assert 0 < result.counters.extra.get("drafter_useful_flops", 0) <= result.counters.drafter.flops
    assert adapter.max_draft_nodes == 6 and adapter.details["choices"].endswith("choices.json")
    assert rows == ([1, 2, 1] if kind == "hydra" else [1, 1, 1])


class ReleasedResBlock(nn.Module):
    """The released code's block (FasterDecoding/Medusa ``ResBlock``), to write its layout from."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


@pytest.mark.parametrize("layers, suffix", [(1, ".pt"), (2, ".safetensors")])
def test_the_released_layout_reads_as_the_heads_it_holds(medusa_setup, tmp_path, layers, suffix):
    target, _, _ = medusa_setup
    hidden, vocab = target.config.hidden_size, target.vocab_size
    torch.manual_seed(3)
    released = nn.ModuleList(nn.Sequential(*([ReleasedResBlock(hidden)] * layers), nn.Linear(hidden, vocab, bias=False))
                             for _ in range(3))  # one block instance repeated, as the released code builds it
    (tmp_path / "config.json").write_text(json.dumps({"medusa_num_heads": 3, "medusa_num_layers": layers,
                                                      "base_model_name_or_path": "target"}))
    state = {name: tensor.clone() for name, tensor in released.state_dict().items()}  # safetensors: no sharing
    if suffix == ".pt":
        torch.save(state, tmp_path / "medusa_lm_head.pt")
    else:
        save_file(state, str(tmp_path / "medusa_lm_head.safetensors"))
    heads = load_heads(tmp_path, target.model)
    assert heads.arch.heads == 3 and heads.arch.block_repeats == layers and not heads.arch.hydra
    states = torch.randn(5, hidden)
    with torch.no_grad():
        for k in range(3):
            torch.testing.assert_close(heads.logits(k + 1, heads.hidden(k + 1, states), None), released[k](states))
    adapter, _ = build_adapter("medusa", {"top_k": 2, "depth": 3, "budget": 6}, BuildInputs(target, None, tmp_path))
    prompt = next(markov_batches(48, 1, 10, seed=5))[:1]
    assert generate(target, adapter, prompt, 12, GREEDY).output_ids == generate(target, NoDrafts(), prompt, 12,
                                                                                 GREEDY).output_ids
    with pytest.raises(DraftcountError, match="choices 'calibrated' needs heads trained here with --heldout"):
        build_adapter("medusa", {"choices": "calibrated"}, BuildInputs(target, None, tmp_path))
    state.pop("2.0.linear.bias")
    (tmp_path / "medusa_lm_head.pt").unlink(missing_ok=True)
    torch.save(state, tmp_path / "medusa_lm_head.pt")
    (tmp_path / "medusa_lm_head.safetensors").unlink(missing_ok=True)
    with pytest.raises(DraftcountError, match="lacks 2.0.linear.bias"):
        load_heads(tmp_path, target.model)


@pytest.mark.parametrize("tree", ["beam", "choices"])
def test_hydra_heads_keep_the_target_distribution(tmp_path, tree):
    """The conformance suite samples `medusa` with its default (Medusa) heads; Hydra's path-conditioned heads go
    through the same enumeration here, in beam-grown and static (choices) trees: on the suite's 6-token zoo, heads
    trained a few steps away from their zero start (so each node's children depend on its path)."""
    zoo = build_small_vocab_zoo(tmp_path)
    request = DrafterTrainRequest(method="medusa", target=str(tmp_path / "target"), data=tmp_path / "tokens.pt",
                                  out=tmp_path / "hydra", steps=8, progress=False,
                                  options={"seq_len": "16", "batch_size": "4", "lr": "0.1", "heads": "3",
                                           "hydra": "true", "warmup_steps": "1"})
    train_medusa(request)
    (tmp_path / "choices.json").write_text(json.dumps([[0], [2], [0, 1], [0, 0], [0, 1, 0]]))
    options = {"top_k": 2, "depth": 3, "budget": 5} if tree == "beam" else {"choices": str(tmp_path / "choices.json")}
    adapter, _ = build_adapter("medusa", options, BuildInputs(zoo.target, None, tmp_path / "hydra"))
    assert adapter.heads.arch.hydra and adapter.heads.blocks[1].weight.abs().sum() > 0
    sampling = SamplingConfig(1.0)
    counts = sampled_distribution(zoo.target, adapter, [1, 2, 3], 3, sampling, SAMPLES, seed=0)
    assert chi_square_pvalue(counts, exact_distribution(zoo.target, [1, 2, 3], 3, sampling)) > ALPHA


def test_a_tree_deeper_than_the_heads_is_one_line(medusa_setup):
    target, root, _ = medusa_setup
    with pytest.raises(DraftcountError, match="depth 4 needs as many heads; the drafter has 3") as error:
        build_adapter("medusa", {"depth": 4}, BuildInputs(target, None, root / "medusa-fresh"))
    assert "\n" not in str(error.value)
