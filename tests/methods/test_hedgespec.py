"""hedgespec: the NormalHedge learner, experts kept in step when not picked, the scores and the drafter-selection
table. Its losslessness (greedy and by enumeration) is the conformance suite's."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from harness import SamplingConfig, generate, wrap_model
from harness.analysis.summary import records_frame
from harness.backend.forward import LMOutput
from harness.data.token_streams import save_tokens
from harness.engine.adapter import AdapterBase, StepContext
from harness.engine.counters import GenerationCounters
from harness.engine.method_spec import BuildInputs, build_adapter, method_spec, parse_method_options
from harness.errors import DraftcountError
from harness.store.records import SCHEMA_VERSION
from harness.training.drafters import DrafterTrainRequest
from harness.trees.tree import TokenTree
from harness.verify.verdict import Verdict
from methods.hedgespec.adapter import Expert, HedgeSpecAdapter
from methods.hedgespec.learner import NormalHedge, normalhedge_scale, normalhedge_weights
from methods.hedgespec.view import hedge_table
from tests.helpers import markov_batches, markov_llama

GREEDY = SamplingConfig()


def test_normalhedge_scale_solves_its_equation_and_weights_follow_positive_regret():
    regrets = [3.0, 1.0, -2.0, 0.5]
    c = normalhedge_scale(regrets)
    mean = sum(math.exp(max(r, 0) ** 2 / (2 * c)) for r in regrets) / len(regrets)
    assert mean == pytest.approx(math.e, rel=1e-6)
    weights = normalhedge_weights(regrets)
    assert weights[2] == 0 and weights[0] > weights[1] > weights[3] > 0 and sum(weights) == pytest.approx(1)
    assert normalhedge_weights([0.0, -1.0]) == [0.5, 0.5]


def test_normalhedge_concentrates_on_the_best_expert_with_small_regret():
    learner = NormalHedge(3)
    total = 0.0
    for _ in range(200):
        total += learner.update([0.2, 0.5, 0.9])
    assert learner.weights[0] > 0.99
    assert total - 200 * 0.2 < 5  # regret against the best expert in hindsight stays small


def test_bad_expert_specs_are_one_line_errors():
    for experts, message in [("pld", "at least 2"), ("pld,nope", "not a catalog method"),
                             ("pld,lyanna:drafter=x", "run-ahead"), ("pld,eagle", "needs drafter=DIR"),
                             ("pld,stand:max_n", "not key=value")]:
        with pytest.raises(DraftcountError, match=message):
            parse_method_options("hedgespec", {"experts": experts})


class FixedTree(AdapterBase):
    """An expert that drafts one fixed tree below the root and keeps what its ``commit`` is handed."""

    def __init__(self, tokens: list[int], parents: tuple[int, ...]) -> None:
        self.tokens, self.parents, self.committed = tokens, parents, None

    def propose(self, ctx: StepContext, sequence: torch.Tensor) -> TokenTree:
        return TokenTree(torch.tensor([int(sequence[0, -1]), *self.tokens]), self.parents)

    def commit(self, ctx: StepContext, tree: TokenTree, verdict: Verdict, target_out: LMOutput) -> None:
        self.committed = tree, verdict, target_out


def test_an_expert_not_picked_commits_its_own_tree_with_the_accepted_text_grafted_after_its_nodes():
    """The hand-off every expert's ``commit`` must take: its own nodes keep their indices, the accepted tokens its
    tree did not hold come after them, and the target's outputs along the path are the picked tree's."""
    picked = FixedTree([5, 6, 7], (-1, 0, 1, 2))  # root -> 5 -> 6 -> 7
    other = FixedTree([5, 9, 8], (-1, 0, 1, 0))  # root -> 5 -> 9, root -> 8
    adapter = HedgeSpecAdapter([Expert("picked", picked), Expert("other", other)], "generation", 0)
    ctx = StepContext(GREEDY, None, GenerationCounters(), 12)
    tree = adapter.propose(ctx, torch.tensor([[1, 2]]))
    adapter.picked = 0  # the learner's pick, whatever its draw
    verdict = Verdict((0, 1, 2), (5, 6), 3, 3)
    target_out = LMOutput(torch.arange(4.0)[None, :, None].expand(1, 4, 12), None)  # row i holds i
    adapter.commit(ctx, tree, verdict, target_out)
    assert picked.committed == (tree, verdict, target_out)
    handed, shadow, rows = other.committed
    assert handed.tokens.tolist() == [2, 5, 9, 8, 6] and handed.parents == (-1, 0, 1, 0, 1)  # 6 grafted below 5
    assert shadow.path == (0, 1, 4) and shadow.new_tokens == (5, 6, 3)
    assert [rows.logits[0, node, 0].item() for node in shadow.path] == [0.0, 1.0, 2.0]  # the picked path's rows
    extra = ctx.counters.extra  # the emitted 5 6 3: the picked tree held 5 6, the other 5
    assert extra["hedge_loss:picked"] == pytest.approx(1 / 3) and extra["hedge_loss:other"] == pytest.approx(2 / 3)


@pytest.fixture(scope="module")
def target_and_head(tmp_path_factory):
    root = tmp_path_factory.mktemp("hedgespec")
    target = wrap_model(markov_llama())
    target.model.save_pretrained(root / "target")
    save_tokens(root / "tokens.pt", torch.cat([next(markov_batches(48, 32, 48, seed=5)).flatten() for _ in range(2)]))
    method_spec("eagle").train(DrafterTrainRequest(method="eagle", target=str(root / "target"), data=root / "tokens.pt",
                                                   out=root / "eagle", steps=40, progress=False,
                                                   options={"seq_len": "48", "batch_size": "8"}))
    return target, root / "eagle"


def test_experts_not_picked_stay_in_step_and_every_step_is_scored(target_and_head):
    target, head = target_and_head
    ar, _ = build_adapter("ar", {}, BuildInputs(target, None, None))
    adapter, _ = build_adapter("hedgespec", {"experts": f"eagle:drafter={head},pld,stand,eagle:drafter={head}:budget=4"},
                               BuildInputs(target, None, None))
    assert adapter.details["experts"] == ["eagle", "pld", "stand", "eagle2"]
    alone, _ = build_adapter("eagle", {}, BuildInputs(target, None, head))
    picks = set()
    for prompt in next(markov_batches(48, 20, 10, seed=13)):
        result = generate(target, adapter, prompt[None], 40, GREEDY)
        assert result.output_ids == generate(target, ar, prompt[None], 40, GREEDY).output_ids
        # every eagle expert, picked or not, holds the target's features of every token but the newest
        produced = len(prompt) + sum(result.counters.step_tokens) - 1
        known = {expert.name: expert.adapter.fed_len + expert.adapter.pending.shape[0]
                 for expert in adapter.experts if expert.name.startswith("eagle")}
        assert known == {"eagle": produced, "eagle2": produced}
        solo = generate(target, alone, prompt[None], 40, GREEDY)
        assert alone.fed_len + alone.pending.shape[0] == len(prompt) + sum(solo.counters.step_tokens) - 1
        steps = len(result.counters.step_accepted)
        trace = result.counters.trace["hedge_pick"]
        assert len(trace) == steps
        extra = result.counters.extra
        assert sum(extra.get(f"picked:{name}", 0) for name in adapter.details["experts"]) == steps
        picks.update(int(pick) for pick in trace)
    assert len(picks) >= 2  # the learner tried several experts


def test_a_picked_expert_loses_nothing_on_what_it_drafted(target_and_head):
    """At T = 0 the picked expert's loss is 1 - (accepted + 1 if its tree held the bonus) / (accepted + 1), so
    the per-step losses of the pick are consistent with the step's acceptance."""
    target, head = target_and_head
    adapter, _ = build_adapter("hedgespec", {"experts": f"eagle:drafter={head},pld"}, BuildInputs(target, None, None))
    result = generate(target, adapter, next(markov_batches(48, 1, 10, seed=3))[0][None], 40, GREEDY)
    lower = sum(1 - (a + 1) / (a + 1) for a in result.counters.step_accepted)
    upper = sum(1 - a / (a + 1) for a in result.counters.step_accepted)
    assert lower - 1e-9 <= result.counters.extra["hedge_picked_loss"] <= upper + 1e-9


def test_hedge_table_from_records(tmp_path):
    def record(picks, losses, learner):
        return {"schema_version": SCHEMA_VERSION, "method": "hedgespec", "variant": "hedgespec", "role": "method", "compared_method": "hedgespec",
                "dataset": "code", "sampling": {"temperature": 0.0}, "pair_id": "p#0", "prompt_tokens": 4,
                "method_details": {"experts": ["eagle", "pld"]},
                "counters": {"new_tokens": 10, "wall_seconds": 1.0, "accepted_tokens": 4, "drafted_tokens": 8,
                             "step_accepted": [1] * len(picks), "accepted_by_depth": [],
                             "target": {"forwards": 6, "tokens": 20, "flops": 1.0},
                             "drafter": {"forwards": 1, "tokens": 1, "flops": 1.0},
                             "extra": {"hedge_learner_loss": learner, "hedge_loss:eagle": losses[0],
                                       "hedge_loss:pld": losses[1], "picked:eagle": picks.count(0),
                                       "picked:pld": picks.count(1)},
                             "trace": {"hedge_pick": picks}}}
    path = tmp_path / "hedgespec.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [record([1, 1, 0, 0, 0, 0], [1.2, 3.0], 2.0)]) + "\n")
    table = hedge_table(records_frame([path])).set_index("expert")
    assert table.loc["eagle"].picked_share == pytest.approx(4 / 6)
    assert table.loc["eagle"].loss_per_step == pytest.approx(0.2)
    assert table.loc["eagle"].regret_per_step == pytest.approx(2.0 / 6 - 0.2)
    assert table.loc["pld"]["picked_steps_1_4"] == pytest.approx(0.5)
    assert table.loc["eagle"]["picked_steps_5_8"] == pytest.approx(1.0)
    assert pd.isna(table.loc["eagle"]["picked_steps_33_on"])
