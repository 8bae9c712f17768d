"""The drafting-convention study's table (``harness/analysis/drafting.py``): the two variants of each chain paired
by prompt set and temperature, the tau ratio, the main variant's convention, and the report section."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.drafting import convention_of, drafting_pairs, drafting_section
from harness.analysis.view import Inputs
from harness.analysis.views import all_views


def row(variant, method, tau, temperature=1.0, dataset="mt_bench", drafts=None):
    return {"variant": variant, "method": method, "dataset": dataset, "temperature": temperature, "tau": tau,
            "accepted_per_step": tau - 1, "speedup_paired_mean": tau / 2, "speedup_ci_low": tau / 2 - 0.05,
            "speedup_ci_high": tau / 2 + 0.05, "options": json.dumps({"drafts": drafts} if drafts else {})}


def summary() -> pd.DataFrame:
    return pd.DataFrame([
        row("eagle_chain_topk", "eagle", 1.2), row("eagle_chain_sampled", "eagle", 1.8),
        row("sd_chain_topk", "sd", 1.5), row("sd_chain_sampled", "sd", 1.5),
        row("dspark_chain_sampled", "dspark", 2.0),  # one convention only: no pair
        row("eagle_chain_topk", "eagle", 2.0, temperature=0.0),  # T = 0: its sampled twin did not run there
        row("eagle", "eagle", 1.7, drafts="sampled"), row("eagle", "eagle", 1.6, dataset="gsm8k", drafts="sampled"),
        row("eagle", "eagle", 1.9, temperature=0.0, drafts="topk")])


def test_each_chain_pairs_its_two_conventions_with_the_main_variants_choice():
    assert convention_of("eagle_chain_topk") == ("eagle_chain", "topk") and convention_of("eagle") is None
    assert convention_of("_topk") is None
    pairs = drafting_pairs(summary())
    assert list(pairs.method) == ["eagle", "sd"] and set(pairs.temperature) == {1.0}
    eagle = pairs.set_index("method").loc["eagle"]
    assert eagle.tau_ratio == pytest.approx(1.5) and eagle.accepted_per_step_topk == pytest.approx(0.2)
    assert eagle.main_drafts == "sampled"  # its T = 1 runs, not its T = 0 one
    assert pairs.set_index("method").loc["sd", "main_drafts"] == "-"  # no main variant named sd here
    mislabelled = summary().assign(options=lambda frame: [
        json.dumps({"drafts": "sampled"}) if variant == "sd_chain_topk" else text
        for variant, text in zip(frame.variant, frame.options)])
    with pytest.raises(Exception, match="'sd_chain_topk' is named for topk drafts but ran with drafts: sampled"):
        drafting_pairs(mislabelled)


def test_the_report_section_shows_both_conventions_side_by_side():
    text = drafting_section(summary())
    assert "| eagle | mt_bench | 1 | 0.20 | 1.20 | 0.60 [0.55, 0.65] | 0.80 | 1.80 | 0.90 [0.85, 0.95] | 1.50 | " \
           "sampled |" in text
    assert drafting_section(summary().iloc[4:]) == ""
    view = next(view for view in all_views() if view.name == "drafting")
    assert view.markdown(Inputs(summary(), None))[0] == "### Drafting at T > 0: top-k or sampled drafts"


def write_chain(folder, variant, method, steps, drafts):
    """Two prompts of ``variant`` at T = 1, each paired with an ar run, as a bench job writes them."""
    from tests.analysis.test_report import make_record

    records = []
    for index, prompt in enumerate(("p1", "p2")):
        records.append(make_record(variant, method, "method", prompt, 1.0, sum(steps) + len(steps) + 1,
                                   0.5 + 0.1 * index, steps, options={"drafts": drafts, "depth": 4}))
        records.append(make_record("ar", "ar", "baseline", prompt, 1.0, 8, 1.0 + 0.1 * index, [0] * 8))
    path = folder / variant / "code-t1.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_the_command_writes_the_table_from_records_alone(tmp_path, capsys):
    from harness.cli import main

    paths = [write_chain(tmp_path, "eagle_chain_topk", "eagle", [0, 1, 0], "topk"),
             write_chain(tmp_path, "eagle_chain_sampled", "eagle", [2, 3, 1], "sampled"),
             write_chain(tmp_path, "eagle", "eagle", [2, 2], "sampled")]
    out = tmp_path / "tables" / "drafting.csv"
    assert main(["drafting-table", *map(str, paths), "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table.method) == ["eagle"] and table.tau_topk[0] == pytest.approx(4 / 3, abs=1e-5)  # 6 significant digits
    assert table.tau_sampled[0] == pytest.approx(3.0) and table.main_drafts[0] == "sampled"
    assert "| eagle | code | 1 |" in capsys.readouterr().out
    assert main(["drafting-table", str(paths[0]), "--out", str(out)]) == 2  # one convention: no pair
    assert "no chain ran by both conventions" in capsys.readouterr().err
    assert main(["drafting-table", str(tmp_path / "none.jsonl"), "--out", str(out)]) == 2


@pytest.mark.parametrize("folder", ["", "smollm2/"])
def test_the_committed_drafting_tables_rederive_from_the_published_records(folder, tmp_path):
    """results/<folder>studies/tables/drafting.csv from the published records alone: the study's chains
    (studies/records/*_chain_*) and the main variants' runs at T = 1 on their set (records/)."""
    from harness.cli import main

    results = Path(__file__).resolve().parents[2] / "results" / folder
    committed = pd.read_csv(results / "studies" / "tables" / "drafting.csv")
    chains = sorted((results / "studies" / "records").glob("*_chain_*/*.jsonl.gz"))
    mains = [results / "records" / method / f"{dataset}-t1.jsonl.gz"
             for method, dataset in zip(committed.method, committed.dataset)]
    out = tmp_path / "drafting.csv"
    assert main(["drafting-table", *map(str, chains + mains), "--out", str(out)]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out), committed)
