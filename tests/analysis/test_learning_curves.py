"""The drafter studies (``harness/analysis/learning_curves.py``, workflow/rules/drafter_studies.smk): the learning
curves' table from drafters' training metrics, Kendall's tau between adjacent rungs, the lr study's choice, the
commands, and the drafters the workflow plans (each family's entry at a multiple of its budget or at another rate)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.analysis.learning_curves import (calibrated_columns, chain_columns, curve_rows, draft_lm_rows,
                                              kendall_tau, plot_learning_curves, ranking_stability, shape_label,
                                              stability_table, with_mean_agreement)
from harness.analysis.lr_study import lr_rows, stale_rates
from harness.cli import main
from tests.workflow.test_workflow import overrides, snakemake


def metrics(tokens: int, agreement: list[float]) -> dict:
    return {"train": {"tokens": tokens, "flops": 6.0 * tokens}, "heldout_top1_agreement_by_step": agreement}


FAMILIES = {  # family -> step-1 agreement at rungs 0.5, 1, 2: a and b swap places between 1 and 2
    "a": [0.30, 0.40, 0.45], "b": [0.20, 0.35, 0.50], "c": [0.10, 0.15, 0.20]}


def study_metrics() -> tuple[dict, dict]:
    found, rungs = {}, {}
    for family, values in FAMILIES.items():
        for rung, value in zip((0.5, 1.0, 2.0), values):
            name = family if rung == 1 else f"{family}_lc{rung:g}".replace(".", "")
            found[name] = metrics(int(1000 * rung), [value, value / 2, value / 4])
            rungs[name] = (family, rung)
    return found, rungs


def test_kendall_tau_reads_order_agreement():
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0 and kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)


def test_the_table_and_the_rankings_stability():
    found, rungs = study_metrics()
    curves = curve_rows(found, rungs)
    assert len(curves) == 9 and list(curves[curves.family == "a"].tokens) == [500, 1000, 2000]
    assert curves.set_index("drafter").loc["b_lc2", "agreement_mean"] == pytest.approx((0.5 + 0.25 + 0.125) / 3)
    stability = ranking_stability(curves)
    assert list(stability.kendall_tau) == pytest.approx([1.0, 1 / 3])  # a, b, c; then b overtakes a
    with pytest.raises(Exception, match="no heldout_top1_agreement_by_step"):
        curve_rows({"a": {"train": {}}}, {"a": ("a", 1.0)})


def test_the_chain_runs_add_tau_and_speedup_per_rung_and_a_ranking_by_tau():
    found, rungs = study_metrics()
    curves = curve_rows(found, rungs)
    rows = []  # each rung's chain: tau in one order of the families at T = 0 (c, b, a), by agreement at T = 1
    for name, (family, rung) in rungs.items():
        score = found[name]["heldout_top1_agreement_by_step"][0]
        for temperature, tau in ((0.0, 3 - "abc".index(family) + rung / 100), (1.0, 1 + score)):
            rows.append({"variant": f"{name}_chain", "temperature": temperature, "tau": tau,
                         "speedup_paired_mean": tau / 2, "speedup_ci_low": tau / 2 - 0.1,
                         "speedup_ci_high": tau / 2 + 0.1})
    rows.append({"variant": "unrelated", "temperature": 0.0, "tau": 9.0, "speedup_paired_mean": 9.0,
                 "speedup_ci_low": 9.0, "speedup_ci_high": 9.0})
    chains = {name: f"{name}_chain" for name in rungs}
    merged = curves.merge(chain_columns(pd.DataFrame(rows), chains), on="drafter", how="left")
    row = merged.set_index("drafter").loc["b_lc2"]
    assert row.chain_tau_t0 == pytest.approx(2.02) and row.chain_tau_t1 == pytest.approx(1.5)
    assert (row.chain_speedup_t1_low, row.chain_speedup_t1_high) == pytest.approx((0.65, 0.85))
    stability = stability_table(merged)
    assert list(stability.kendall_tau_chain_tau_t0) == pytest.approx([1.0, 1.0])  # b never overtakes a there
    assert list(stability.kendall_tau_chain_tau_t1) == pytest.approx(list(stability.kendall_tau))
    assert plot_learning_curves(merged, stability).axes[0].get_title() == "chain tau, T = 0"
    with pytest.raises(Exception, match="no records of the chain run 'a_chain'"):
        chain_columns(pd.DataFrame([row for row in rows if row["variant"] != "a_chain"]), {"a": "a_chain"})


def test_the_calibrated_runs_add_each_rungs_shape_accepted_drafts_tau_and_speedup():
    found, rungs = study_metrics()
    curves = curve_rows(found, rungs)
    rows = []  # rung 1 is the main variant's run (variant "a"); its run on another set is not read
    for name, depth, tau in (("a_lc05", 1, 1.3), ("a", 2, 1.6), ("a_lc2", 3, 2.1)):
        options = json.dumps({"depth": depth, "budget": 2 * depth, "drafts": "topk", "top_k": 4, "drafter": "x"})
        for dataset in ("mt_bench", "gsm8k"):
            rows.append({"variant": name, "dataset": dataset, "temperature": 0.0, "tau": tau if dataset == "mt_bench"
                         else 9.0, "accepted_per_step": tau - 1, "options": options, "speedup_paired_mean": tau / 2,
                         "speedup_ci_low": tau / 2 - 0.1, "speedup_ci_high": tau / 2 + 0.1})
    runs = {"a_lc05": "a_lc05", "a": "a", "a_lc2": "a_lc2"}
    merged = curves.merge(calibrated_columns(pd.DataFrame(rows), runs, "mt_bench"), on="drafter", how="left")
    row = merged.set_index("drafter").loc["a_lc2"]
    assert row.calibrated_shape_t0 == "depth 3, budget 6" and row.calibrated_tau_t0 == 2.1  # T = 0: no convention
    assert row.calibrated_accepted_t0 == pytest.approx(1.1) and row.calibrated_speedup_t0_high == pytest.approx(1.15)
    assert merged.set_index("drafter").calibrated_tau_t0.isna().sum() == 6  # families b and c ran no calibrated runs
    stability = stability_table(merged)
    titles = [axis.get_title() for axis in plot_learning_curves(merged, stability).axes]
    assert "paired speedup at its calibrated shape, T = 0" in titles
    assert shape_label(json.dumps({"gamma": 3, "drafts": "sampled"})) == "gamma 3, sampled drafts"
    assert shape_label(json.dumps({"latency_file": "x.json"})) == "its own plan"
    with pytest.raises(Exception, match="no records of the calibrated run 'a_lc2'"):
        calibrated_columns(pd.DataFrame(rows[:4]), runs, "mt_bench")


def written_study_metrics(tmp_path):
    """``study_metrics`` written as drafter metrics files: their paths, the table to write and the --rungs spec."""
    found, rungs = study_metrics()
    paths = []
    for name, values in found.items():
        paths.append(tmp_path / f"drafter-{name}.json")
        paths[-1].write_text(json.dumps(values))
    spec = ",".join(f"{name}={family}:{rung:g}" for name, (family, rung) in rungs.items())
    return paths, tmp_path / "tables" / "learning_curves.csv", spec


def test_the_command_writes_the_tables_and_the_figure(tmp_path, capsys):
    paths, out, spec = written_study_metrics(tmp_path)
    assert main(["learning-curves", "--metrics", *map(str, paths), "--rungs", spec, "--out", str(out), "--figure",
                 str(tmp_path / "figures" / "learning_curves")]) == 0
    assert len(pd.read_csv(out)) == 9 and len(pd.read_csv(tmp_path / "tables" / "learning_curves_stability.csv")) == 2
    assert (tmp_path / "figures" / "learning_curves.png").stat().st_size > 1000
    assert main(["learning-curves", "--metrics", str(paths[0]), "--rungs", "a=a", "--out", str(out)]) == 2
    assert "DRAFTER=FAMILY:RUNG" in capsys.readouterr().err


def draft_lm(tokens: int, agreement: float, perplexity: float) -> dict:
    """A zoo LM's metrics as train_lm writes them for the draft LM."""
    return {"role": "draft", "training": {"tokens": tokens, "steps": tokens // 100},
            "top1_agreement_with_target": agreement, "heldout_perplexity": perplexity}


def test_the_draft_lms_rungs_join_the_curves_without_changing_the_drafters_mean(tmp_path):
    """The draft LM records one agreement (its top-1 against the target's, teacher-forced): a row of family
    `draft LM` with its perplexity, no mean over steps, and the drafters' mean still over their shared steps."""
    found, rungs = study_metrics()
    lm = draft_lm_rows({"draft": draft_lm(1000, 0.26, 204.0), "draft_lc05": draft_lm(500, 0.2, 388.0)},
                       {"draft": 1.0, "draft_lc05": 0.5})
    curves = with_mean_agreement(pd.concat([curve_rows(found, rungs).drop(columns=["agreement_mean",
                                                                                      "agreement_steps"]), lm]))
    assert set(curves.agreement_steps) == {3} and curves[curves.family == "draft LM"].agreement_mean.isna().all()
    assert list(curves[curves.family == "draft LM"].heldout_perplexity) == [204.0, 388.0]
    chained = curves.assign(chain_tau_t0=[1.0 + index for index in range(len(curves))])
    chained.loc[chained.family == "draft LM", "chain_tau_t0"] = float("nan")  # it runs no chain
    assert list(ranking_stability(chained[chained.rung >= 0.5], "chain_tau_t0").families) == [3, 3]
    with pytest.raises(Exception, match="no top1_agreement_with_target"):
        draft_lm_rows({"draft": {"training": {}}}, {"draft": 1.0})
    paths, out, spec = written_study_metrics(tmp_path)
    for name, rung in (("draft", 1.0), ("draft_lc05", 0.5)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(draft_lm(int(1000 * rung), 0.1 + 0.2 * rung, 400 - 200 * rung)))
    assert main(["learning-curves", "--metrics", *map(str, paths), "--rungs", spec, "--out", str(out),
                 "--draft-lm", "draft=1,draft_lc05=0.5"]) == 0
    table = pd.read_csv(out)
    assert list(table[table.family == "draft LM"].agreement_step1) == pytest.approx([0.2, 0.3])
    fits = pd.read_csv(tmp_path / "tables" / "learning_curves_fit.csv")
    assert list(fits[fits.family == "draft LM"].metric) == ["agreement_step1"]  # no mean to fit
    assert main(["learning-curves", "--metrics", *map(str, paths), "--rungs", spec, "--out", str(out),
                 "--draft-lm", "draft=one"]) == 2


def test_the_workflow_plans_each_rung_at_its_share_of_the_budget_ungated(tmp_path):
    plan = snakemake("-n", "-p", "study_learning_curves", "--profile", "workflow/profiles/smoke", *overrides(tmp_path))
    assert plan.returncode == 0, plan.stderr
    # the smoke config: eagle's budget 10,240 positions, one more rung at 1/2
    assert "--budget-tokens 5120" in plan.stdout and "drafters/eagle_lc05" in plan.stdout
    assert "--rungs eagle_lc05=eagle:0.5,eagle=eagle:1" in plan.stdout


def test_a_calibrated_family_or_temperature_the_study_cannot_run_stops_the_plan(tmp_path):
    base = "rungs: [0.5], families: [eagle], calibrated: {dataset: stdlib_code"
    for extra, message in ((", families: [lyanna]}", "calibrated.families names 'lyanna'"),
                           (", temperatures: [1.0]}", "does not run at T = 1")):
        plan = snakemake("-n", "study_learning_curves", "--profile", "workflow/profiles/smoke", *overrides(tmp_path),
                         "learning_curves={" + base + extra + "}")
        assert plan.returncode != 0 and message in plan.stdout + plan.stderr, plan.stderr[-2000:]


def test_the_lr_study_chooses_each_familys_rate_by_heldout_agreement():
    found = {"a": metrics(1000, [0.4, 0.3, 0.2]), "a_lr0003": metrics(1000, [0.5, 0.4, 0.3]),
             "b": metrics(1000, [0.3, 0.3, 0.3]), "b_lr0003": metrics(1000, [0.3, 0.3, 0.3])}
    rates = {"a": ("a", 0.001), "a_lr0003": ("a", 0.003), "b": ("b", 0.001), "b_lr0003": ("b", 0.003)}
    table = lr_rows(found, rates).set_index("drafter")
    assert bool(table.loc["a_lr0003", "chosen"]) and not table.loc["a", "chosen"]
    assert bool(table.loc["b", "chosen"]) and not table.loc["b_lr0003", "chosen"]  # a tie keeps the smaller rate


def test_the_lr_studys_mean_averages_the_same_draft_steps_for_every_family():
    """Issue 79: a family recording two steps (eagle's) once made its "steps 1-3" mean average two steps against
    the others' three; the mean now covers the steps every family records, and the choice follows it."""
    found = {"a": metrics(1000, [0.40, 0.30, 0.00]), "a_lr0003": metrics(1000, [0.38, 0.28, 0.30]),
             "e": metrics(1000, [0.5, 0.2]), "e_lr0003": metrics(1000, [0.4, 0.4])}
    rates = {"a": ("a", 0.001), "a_lr0003": ("a", 0.003), "e": ("e", 0.001), "e_lr0003": ("e", 0.003)}
    table = lr_rows(found, rates).set_index("drafter")
    assert set(table.agreement_steps) == {2}  # e records two steps: every family's mean covers steps 1-2
    assert table.loc["a", "agreement_mean"] == pytest.approx(0.35) and table.loc["e_lr0003", "agreement_mean"] == 0.4
    assert bool(table.loc["a", "chosen"]) and bool(table.loc["e_lr0003", "chosen"])  # over 1-3, a_lr0003 would win
    assert json.loads(table.loc["a", "agreement_by_step"]) == [0.40, 0.30, 0.00]  # every step kept, re-derivable
    three = lr_rows({name: found[name] for name in ("a", "a_lr0003")}, {"a": rates["a"], "a_lr0003": rates["a_lr0003"]})
    assert list(three.agreement_steps) == [3, 3] and bool(three.set_index("drafter").loc["a_lr0003", "chosen"])


def test_the_workflow_plans_the_lr_studys_drafters(tmp_path):
    plan = snakemake("-n", "-p", "study_lr", "--profile", "workflow/profiles/smoke", *overrides(tmp_path))
    assert plan.returncode == 0, plan.stderr
    # the smoke config: eagle's own 0.01 and the rates beside it on the ladder 0.001 ... 0.03 (neighbours: 1)
    assert "--rates eagle_lr0003=eagle:0.003,eagle=eagle:0.01,eagle_lr003=eagle:0.03" in plan.stdout
    assert "lr=0.003" in plan.stdout and "drafters/eagle_lr0003" in plan.stdout
    assert "drafters/eagle_lr0001" not in plan.stdout  # two steps below its own 0.01: not trained


def test_the_lr_study_without_neighbours_trains_every_rate_and_stops_at_a_ladders_edge(tmp_path):
    def plan(rates, neighbours):
        overlay = tmp_path / "lr.yaml"
        overlay.write_text(f"lr_study: {{rates: {rates}, neighbours: {neighbours}, families: [eagle]}}\n")
        return snakemake("-n", "-p", "study_lr", "--configfile", "workflow/config/default.yaml",
                         "workflow/config/smoke.yaml", str(overlay), *overrides(tmp_path))

    every = plan([0.0003, 0.001], 0)  # eagle's own 0.01, off this grid, is one more row (the main drafter)
    assert every.returncode == 0, every.stderr
    assert "--rates eagle_lr00003=eagle:0.0003,eagle_lr0001=eagle:0.001,eagle=eagle:0.01" in every.stdout
    edge = plan([0.003, 0.01], 1)
    assert edge.returncode != 0
    said = edge.stdout + edge.stderr
    assert "family 'eagle''s own rate 0.01 has fewer than 1 rates of lr_study.rates on one side" in said
    overlay = tmp_path / "lr.yaml"  # the same ladder: any other target plans (the study alone needs the ladder)
    other = snakemake("-n", "bench_ar", "--configfile", "workflow/config/default.yaml", "workflow/config/smoke.yaml",
                      str(overlay), *overrides(tmp_path))
    assert other.returncode == 0, other.stdout[-2000:] + other.stderr[-2000:]


def test_the_figure_is_redrawn_from_the_written_tables_with_labelled_log_ticks(tmp_path):
    paths, out, spec = written_study_metrics(tmp_path)
    assert main(["learning-curves", "--metrics", *map(str, paths), "--rungs", spec, "--out", str(out)]) == 0
    # no metrics needed: the committed tables alone draw the figure again (results/*/studies/tables)
    assert main(["learning-curves", "--table", str(out), "--figure", str(tmp_path / "again" / "curves")]) == 0
    assert (tmp_path / "again" / "curves.png").stat().st_size > 1000
    assert main(["learning-curves", "--table", str(tmp_path / "none.csv"), "--figure", str(tmp_path / "x")]) == 2
    two_rungs = pd.read_csv(out)
    two_rungs = two_rungs[two_rungs.rung >= 1]  # the real target's study: two rungs (1x, 2x), a factor of 2 apart
    figure = plot_learning_curves(two_rungs, stability_table(two_rungs))
    figure.canvas.draw()
    labels = [label.get_text() for label in figure.axes[0].get_xticklabels() if label.get_text()]
    assert len(labels) > 2, labels  # more than the two rungs' own positions: round values between them


def test_a_configured_rate_the_lr_study_did_not_choose_is_said():
    table = pd.DataFrame({"family": ["a", "a", "b", "b"], "lr": [0.001, 0.003, 0.001, 0.003],
                          "chosen": [False, True, True, False]})
    drafters = {"a": {"options": {"lr": 0.003}}, "b": {"options": {"lr": 0.003}}, "c": {"options": {"lr": 1.0}}}
    assert stale_rates(table, drafters) == ["family 'b' trains at lr 0.003, the lr study chose 0.001"]
