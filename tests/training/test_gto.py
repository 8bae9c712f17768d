"""GTO (harness.training.gto): expected acceptance lengths and tree rewards by hand, the clipped surrogate
rewarding the better tree and clipping, the drafters' path log-probabilities against their decode-time tree
scores, and `objective: gto` fine-tuning an EAGLE head and a Lyanna drafter that still decode losslessly."""

import math

import pytest
import torch

from harness import SamplingConfig
from harness.backend.models import load_model
from harness.data.token_streams import save_tokens
from harness.engine.adapter import NoDrafts
from harness.engine.loop import generate
from harness.engine.method_spec import BuildInputs, build_adapter
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.drafters import DrafterTrainRequest
from harness.training.gto import (
    branches, clipped_surrogate, decoding_tree, expected_acceptance_lengths, group_advantages, group_starts,
    longest_accepted_path, path_ratio, row_target, score_tree, tree_reward,
)
from methods.eagle.checkpoint import load_head
from methods.eagle.training import EAGLE_GTO, EagleTrainOptions, train_eagle
from methods.lyanna.model import load_drafter
from methods.lyanna.training import LYANNA_GTO, train_lyanna
from harness.trees.beam_shape import BeamShape
from tests.helpers import markov_batches, markov_llama

PARENTS = (-1, 0, 0, 1, 1, 3)  # root; 1, 2 below it; 3, 4 below 1; 5 below 3


def test_expected_acceptance_lengths_and_reward_by_hand():
    probs = torch.tensor([1.0, 0.5, 0.2, 0.4, 0.3, 0.9])
    assert branches(PARENTS) == [[2], [1, 4], [1, 3, 5]]
    lengths = expected_acceptance_lengths(probs, PARENTS)
    want = [0.2, 0.5 + 0.5 * 0.3, 0.5 + 0.5 * 0.4 + 0.5 * 0.4 * 0.9]
    assert torch.allclose(lengths, torch.tensor(want))
    assert math.isclose(float(tree_reward(lengths)), math.log(sum(math.exp(value) for value in want)), rel_tol=1e-6)
    assert float(expected_acceptance_lengths(torch.ones(1), (-1,))) == 0.0  # a root-only tree accepts nothing


def test_longest_accepted_path_follows_the_targets_argmax():
    tokens = [7, 3, 5, 8, 9, 4]
    assert longest_accepted_path(tokens, PARENTS, greedy=[3, 8, 0, 4, 0, 0]) == [1, 3, 5]
    assert longest_accepted_path(tokens, PARENTS, greedy=[3, 9, 0, 0, 0, 0]) == [1, 4]
    assert longest_accepted_path(tokens, PARENTS, greedy=[6, 0, 0, 0, 0, 0]) == []


def test_advantages_are_debiased_and_standardised():
    current, reference = torch.tensor([2.0, 1.0, 3.0]), torch.tensor([1.0, 1.0, 1.0])
    advantages = group_advantages(current, reference, 1e-6)
    assert torch.allclose(advantages, torch.tensor([0.0, -1.0, 1.0]) * math.sqrt(1.5), atol=1e-4)
    assert torch.allclose(group_advantages(current, current, 1e-6), torch.zeros(3))  # no gain over the reference
    assert float(path_ratio(torch.tensor(-1.0), torch.tensor(-3.0), 4)) == pytest.approx(math.exp(0.5))
    assert float(path_ratio(torch.tensor(0.0), torch.tensor(0.0), 0)) == 1.0


def test_the_loss_rewards_the_tree_with_higher_expected_acceptance():
    """Two prefixes in a group; the drafter's tree at the first accepts more (by the target's probabilities).
    A step on L_GTO raises the log-probability of that tree's accepted path and lowers the other's, and L_GTO
    is lower when the drafter puts more mass on the better tree's path."""
    parents = (-1, 0, 1)
    better = tree_reward(expected_acceptance_lengths(torch.tensor([1.0, 0.9, 0.8]), parents))
    worse = tree_reward(expected_acceptance_lengths(torch.tensor([1.0, 0.3, 0.1]), parents))
    reference = torch.stack([worse, worse])  # the same reference reward at both: only the drafter's trees differ
    advantages = group_advantages(torch.stack([better, worse]), reference, 1e-6)
    assert float(advantages[0]) > 0 > float(advantages[1])
    start = torch.zeros(5)
    paths = [torch.tensor([0, 1]), torch.tensor([2, 3])]  # each tree's accepted path: two draft tokens

    def surrogate(logits: torch.Tensor) -> torch.Tensor:
        logprobs = torch.log_softmax(logits, dim=-1)
        reference_logprobs = torch.log_softmax(start, dim=-1)
        ratios = torch.stack([path_ratio(logprobs[path].sum(), reference_logprobs[path].sum(), 2) for path in paths])
        return clipped_surrogate(ratios, advantages, 0.2)

    logits = start.clone().requires_grad_(True)
    surrogate(logits).backward()
    stepped = torch.log_softmax(start - 0.1 * logits.grad, dim=-1)
    before = torch.log_softmax(start, dim=-1)
    assert stepped[paths[0]].sum() > before[paths[0]].sum()
    assert stepped[paths[1]].sum() < before[paths[1]].sum()
    toward_better = torch.tensor([0.1, 0.1, 0.0, 0.0, 0.0])
    toward_worse = torch.tensor([0.0, 0.0, 0.1, 0.1, 0.0])
    assert float(surrogate(toward_better)) < float(surrogate(start)) < float(surrogate(toward_worse))


def test_clipping_stops_the_gradient_outside_the_trust_region():
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])
    log_ratios = torch.tensor([0.5, -0.5, -0.5, 0.5], requires_grad=True)  # s ~ 1.65, 0.61, 0.61, 1.65
    loss = clipped_surrogate(torch.exp(log_ratios), advantages, 0.2)
    loss.backward()
    # past 1 + eps with A > 0, or below 1 - eps with A < 0: clipped, no gradient; the other side is not clipped
    assert log_ratios.grad[0] == 0 and log_ratios.grad[1] == 0
    assert log_ratios.grad[2] < 0 and log_ratios.grad[3] > 0
    want = -(1.2 * 1.0 + 0.8 * -1.0 + math.exp(-0.5) * 1.0 + math.exp(0.5) * -1.0) / 4
    assert float(loss.detach()) == pytest.approx(want, rel=1e-5)


def test_group_starts_are_adjacent_non_overlapping_and_inside_the_row():
    for seed in range(5):
        groups = group_starts(48, 4, 2, seed)
        assert len(groups) == 2 and all(group == list(range(group[0], group[0] + 4)) for group in groups)
        assert groups[0][-1] < groups[1][0] and groups[0][0] >= 1 and groups[1][-1] <= 47
    assert group_starts(48, 4, 2, 3) == group_starts(48, 4, 2, 3)
    assert group_starts(3, 4, 1, 0) == [[1, 2]]


def test_gto_needs_init():
    with pytest.raises(DraftcountError, match="init="):
        parse_options(EagleTrainOptions, {"objective": "gto"}, "eagle training")
    with pytest.raises(DraftcountError, match="unknown training objective"):
        parse_options(EagleTrainOptions, {"objective": "gtoo"}, "eagle training")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread here: on a small shared machine, several threads of these tiny models spin and slow down
    many-fold. Restored after the module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def gto_setup(tmp_path_factory):
    """A briefly trained target, its token stream, and an EAGLE head and a Lyanna drafter trained on it."""
    root = tmp_path_factory.mktemp("gto")
    markov_llama().save_pretrained(
        root / "target")
    batches = markov_batches(48, 64, 48, seed=5)
    save_tokens(root / "tokens.pt", torch.cat([next(batches).flatten() for _ in range(4)]))
    for method, train in (("eagle", train_eagle), ("lyanna", train_lyanna)):
        train(request(root, method, f"{method}_init", 40, unroll_steps="3" if method == "lyanna" else "1"))
    return load_model(str(root / "target"), with_tokenizer=False), root


def request(root, method, out, steps, **options) -> DrafterTrainRequest:
    return DrafterTrainRequest(method=method, target=str(root / "target"), data=root / "tokens.pt", out=root / out,
                               steps=steps, progress=False,
                               options={"seq_len": "48", "batch_size": "8", "lr": "3e-3", **options})


@pytest.mark.parametrize("method", ["eagle", "lyanna"])
def test_path_logprob_matches_the_decoding_trees_scores(gto_setup, method):
    """The differentiable log-probability of a path equals the beam's cumulative score of its last node."""
    target, root = gto_setup
    hooks = {"eagle": EAGLE_GTO, "lyanna": LYANNA_GTO}[method]
    drafter = {"eagle": load_head, "lyanna": load_drafter}[method](root / f"{method}_init", target.model)
    adapter = hooks.adapter(drafter, target, BeamShape(3, 4, 12))
    tokens = next(markov_batches(48, 1, 40, seed=9))[0]
    row = row_target(target, tokens)
    state = hooks.catch_up(drafter, row)
    for prefix_len in (3, 17, 38):
        tree = decoding_tree(adapter, row, prefix_len)
        for node in range(1, tree.size):
            path = tree.path_to(node)[1:]
            logprob = hooks.path_logprob(drafter, state, prefix_len, tree.tokens[path])
            score = adapter.beam.pool_scores[adapter.beam.pool_of_node[node]]
            assert float(logprob.detach()) == pytest.approx(float(score), abs=1e-4), (prefix_len, node)
        score = score_tree(row, prefix_len, tree)
        assert float(score.node_probs.min()) >= 0 and float(score.node_probs.max()) <= 1


@pytest.mark.parametrize("method", ["eagle", "lyanna"])
def test_objective_gto_fine_tunes_a_trained_drafter_that_stays_lossless(gto_setup, method):
    target, root = gto_setup
    train = {"eagle": train_eagle, "lyanna": train_lyanna}[method]
    options = {"objective": "gto", "init": str(root / f"{method}_init"), "batch_size": "4", "gto_rows": "1",
               "gto_depth": "3", "gto_budget": "8", "gto_top_k": "3"}
    first = train(request(root, method, f"{method}_gto", 2, **options))
    assert first["train"]["steps"] == 2 and math.isfinite(first["train"]["final_loss"])
    timed = train(DrafterTrainRequest(**{**vars(request(root, method, f"{method}_timed", 10_000, **options)),
                                         "time_budget_s": 1.0}))
    assert timed["train"]["stopped_by"] == "time_budget" and timed["train"]["steps"] < 10_000
    initial = {"eagle": load_head, "lyanna": load_drafter}[method](root / f"{method}_init", target.model)
    tuned = {"eagle": load_head, "lyanna": load_drafter}[method](root / f"{method}_gto", target.model)
    changed = [name for name, value in tuned.state_dict().items()
               if not torch.equal(value, initial.state_dict()[name])]
    assert changed  # it trained
    adapter, _ = build_adapter(method, {}, BuildInputs(target, None, root / f"{method}_gto"))
    for prompt in next(markov_batches(48, 6, 10, seed=7)):
        want = generate(target, NoDrafts(), prompt[None], 24, SamplingConfig()).output_ids
        assert generate(target, adapter, prompt[None], 24, SamplingConfig()).output_ids == want


def test_gto_without_init_is_a_one_line_error(gto_setup):
    _, root = gto_setup
    with pytest.raises(DraftcountError) as error:
        train_lyanna(request(root, "lyanna", "no_init", 1, objective="gto"))
    assert "\n" not in str(error.value) and "init=" in str(error.value)
