"""Speedups as geometric means with a prompt bootstrap; phase columns and the overhead-free bound."""

import numpy as np
import pandas as pd
import pytest

from harness.analysis.timing import geometric_mean, paired_speedup, phase_summary, prompt_bootstrap_interval


def test_an_aa_comparison_centres_on_one_where_the_arithmetic_mean_does_not():
    """Two identical computations with symmetric noise: ratios r and 1/r. Their arithmetic mean is above 1
    (the bias that made an identical computation read 1.12x); the geometric mean is 1."""
    ratios = np.array([1.25, 0.8, 1.6, 0.625, 1.1, 1 / 1.1])
    assert ratios.mean() > 1.04
    assert geometric_mean(ratios) == pytest.approx(1.0)
    low, high = prompt_bootstrap_interval(ratios, np.array(["a", "a", "b", "b", "c", "c"]))
    assert low == pytest.approx(1.0) and high == pytest.approx(1.0)  # each prompt's pair cancels: no spread


def test_the_bootstrap_resamples_prompts_not_turns():
    ratios = np.array([2.0, 2.0, 2.0, 0.5])
    by_turn = prompt_bootstrap_interval(ratios, np.arange(4))
    one_prompt = prompt_bootstrap_interval(ratios, np.zeros(4))
    assert one_prompt[0] == pytest.approx(one_prompt[1])  # one prompt: every resample is the same
    assert by_turn[0] < by_turn[1]


def _turns(wall, new_tokens, host, prompt_ids, suffix=""):
    return {f"wall_seconds{suffix}": wall, f"new_tokens{suffix}": new_tokens, f"phase_host{suffix}": host,
            "prompt_id": prompt_ids}


def test_paired_speedup_and_bound():
    paired = pd.DataFrame({**_turns([1.0, 2.0], [20, 20], [0.5, 0.5], ["p", "q"]),
                           **_turns([2.0, 2.0], [10, 10], [0.2, 0.2], ["p", "q"], "_ar")})
    speed = paired_speedup(paired)
    assert speed["speedup_paired_mean"] == pytest.approx(np.sqrt(4.0 * 2.0))
    assert speed["speedup_total"] == pytest.approx((40 / 3.0) / (20 / 4.0))
    group = paired.assign(phase_prefill=0.1, phase_target=0.4, phase_drafter=[0.3, 1.0], phase_verify=0.1,
                          target_forwards=[6, 6], drafter_forwards=[13, 20])
    row = phase_summary(group, paired)
    # without host time: ar spends (4.0 - 0.4) s on 20 tokens, the method (3.0 - 1.0) s on 40
    assert row["speedup_bound"] == pytest.approx((3.6 / 20) / (2.0 / 40))
    assert row["phase_drafter_per_token"] == pytest.approx(1.3 / 40)
    assert row["host_share"] == pytest.approx(1.0 / 3.0)
    assert row["model_share"] == pytest.approx((0.2 + 0.8 + 1.3) / 3.0)
    assert row["target_seconds_per_forward"] == pytest.approx(0.8 / 10)
    assert row["drafter_seconds_per_forward"] == pytest.approx(1.3 / 33)


def test_records_without_phase_times_give_no_bound():
    paired = pd.DataFrame({**_turns([1.0], [20], [np.nan], ["p"]), **_turns([2.0], [10], [np.nan], ["p"], "_ar")})
    group = paired.assign(phase_prefill=np.nan, phase_target=np.nan, phase_drafter=np.nan, phase_verify=np.nan,
                          target_forwards=[3], drafter_forwards=[0])
    row = phase_summary(group, paired)
    assert np.isnan(row["speedup_bound"]) and np.isnan(row["host_share"]) and np.isnan(row["drafter_seconds_per_forward"])


def test_the_summarys_interval_resamples_prompts_when_a_prompts_turns_are_correlated(tmp_path):
    """12 prompts of 4 turns whose speedups share their prompt's (turns of one prompt are alike: same subject,
    same history). Resampling turns would treat 48 draws as independent and give an interval about half as wide
    (sqrt of 4); the summary's interval resamples the 12 prompts."""
    import json

    from harness.analysis.summary import records_frame, summarize
    from tests.analysis.test_report import make_record

    rng = np.random.default_rng(3)
    records, ratios, prompts = [], [], []
    for prompt in range(12):
        shared = np.exp(rng.normal(0.3, 0.3))
        for turn in range(4):
            ratio = shared * np.exp(rng.normal(0, 0.01))
            ratios.append(ratio)
            prompts.append(f"p{prompt}")
            for role, variant, method, seconds in (("method", "sd", "sd", 1 / ratio), ("baseline", "ar", "ar", 1)):
                record = make_record(variant, method, role, f"p{prompt}", 0.0, 8, seconds, [1, 1, 1])
                records.append({**record, "turn": turn, "pair_id": f"p{prompt}#{turn}"})
    path = tmp_path / "code-t0.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    row = summarize(records_frame([path])).set_index("variant").loc["sd"]
    ratios = np.array(ratios)
    assert row.speedup_paired_mean == pytest.approx(geometric_mean(ratios))
    interval = prompt_bootstrap_interval(ratios, np.array(prompts))
    assert (row.speedup_ci_low, row.speedup_ci_high) == pytest.approx(interval)
    by_turn = prompt_bootstrap_interval(ratios, np.arange(len(ratios)))
    prompt_width = np.log(row.speedup_ci_high / row.speedup_ci_low)
    assert prompt_width > 1.6 * np.log(by_turn[1] / by_turn[0])


def test_leave_one_cluster_out_is_the_bootstrap_without_that_cluster():
    from harness.analysis.timing import cluster_bootstrap, leave_one_cluster_out

    rng = np.random.default_rng(3)
    clusters = np.repeat(np.array(["a", "b", "c", "d", "e"]), 3)
    columns = {"num": rng.random(15), "den": 1 + rng.random(15)}
    ratio = lambda sums: sums["num"] / sums["den"]
    dropped = leave_one_cluster_out(columns, clusters, ratio)
    assert sorted(dropped) == ["a", "b", "c", "d", "e"]
    kept = clusters != "c"
    rest = {name: values[kept] for name, values in columns.items()}
    assert dropped["c"] == (pytest.approx(rest["num"].sum() / rest["den"].sum()),
                            *cluster_bootstrap(rest, clusters[kept], ratio))
    assert dropped["c"][0] != pytest.approx(columns["num"].sum() / columns["den"].sum())
