"""The published records (``harness.analysis.published``): gzip-compressed records re-derive the summary and the
paper's-claims tables exactly (records a tiny run writes; and the committed records, where a run committed them, the
committed tables), and a difference is named in one line."""

import gzip
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.published import compare_tables, first_difference, rederive_tables
from harness.cli import main
from harness.errors import DraftcountError

ROOT = Path(__file__).resolve().parents[2]


def published(records: Path) -> list[Path]:
    """A report's published records: its folder's, and for a studies report the main report's beside it."""
    folders = [records] + ([records.parents[1] / "records"] if records.parent.name == "studies" else [])
    return sorted(path for folder in folders for path in folder.glob("*/*.jsonl.gz"))


def rederivable(records: Path) -> bool:
    """Whether ``records`` are a report's published records: a main report's always (a missing one fails the test);
    a studies folder's where its summary exists and every variant it rows has records there (a studies folder that
    publishes one study's records beside an older studies summary, as study `drafting` does, re-derives that study's
    own table instead: tests/analysis/test_drafting.py)."""
    if records.parent.name != "studies":
        return True
    summary = records.parent / "tables" / "summary.csv"
    if not summary.is_file():
        return False
    variants = {path.name for folder in ([records] + ([records.parents[1] / "records"]
                                                      if records.parent.name == "studies" else []))
                for path in folder.iterdir() if path.is_dir()}
    return set(pd.read_csv(summary, usecols=["variant"]).variant) <= variants


COMMITTED = [(records, records.parent / "tables") for records in sorted(ROOT.glob("results/**/records"))
             if records.is_dir() and any(records.glob("*/*.jsonl.gz")) and rederivable(records)]


@pytest.fixture(scope="module")
def tiny_run(model_dirs, shared_data, tmp_path_factory):
    """sd and lyanna (a fresh drafter, at depth 1 and at the deep shape) paired with ar on 3 MT-Bench prompts, T = 0:
    the raw records and their gzip-compressed copies, as rule `records` writes them."""
    from harness.backend.models import load_model
    from methods.lyanna.model import LyannaArch, new_drafter, save_drafter

    root = tmp_path_factory.mktemp("published")
    target = load_model(str(model_dirs["target"]), with_tokenizer=False)
    save_drafter(new_drafter(target.model, LyannaArch(rank=4), None, seed=3), root / "lyanna", {})
    common = ["--target", str(model_dirs["target"]), "--prompts", str(shared_data / "mt_bench"), "--limit", "3",
              "--max-new-tokens", "12", "--pair-with-ar", "--no-progress", "--dataset", "mt_bench"]
    runs = {"sd": ["--method", "sd", "--draft", str(model_dirs["draft"]), "--opt", "gamma=3"],
            "lyanna": ["--method", "lyanna", "--drafter", str(root / "lyanna"), "--opt", "top_k=1", "--opt", "depth=1",
                       "--opt", "budget=1"],
            "lyanna_deep": ["--method", "lyanna", "--drafter", str(root / "lyanna"), "--opt", "top_k=4",
                            "--opt", "depth=5", "--opt", "budget=24"]}
    raw, packed_files = [], []
    for variant, args in runs.items():
        out = root / "raw" / variant / "mt_bench-t0.jsonl"
        assert main(["run", *args, *common, "--variant", variant, "--out", str(out)]) == 0
        packed = root / "records" / variant / "mt_bench-t0.jsonl.gz"
        packed.parent.mkdir(parents=True)
        packed.write_bytes(gzip.compress(out.read_bytes(), mtime=0))
        raw.append(out)
        packed_files.append(packed)
    return root, raw, packed_files


def test_published_records_rederive_the_tables_summarize_writes(tiny_run, capsys):
    root, raw, packed_files = tiny_run
    assert main(["summarize", *map(str, raw), "--tables-dir", str(root / "tables")]) == 0
    assert main(["claims", *map(str, packed_files), "--out-dir", str(root / "again"), "--compare",
                 str(root / "tables")]) == 0
    claims = pd.read_csv(root / "again" / "claims.csv")
    assert {"sd", "waste"} <= set(claims.claim) and claims.leave_one_out.str.startswith("stable").any()
    assert set(pd.read_csv(root / "again" / "summary.csv").variant) == {"sd", "lyanna", "lyanna_deep"}
    tampered = pd.read_csv(root / "tables" / "claims.csv")
    tampered.loc[0, "value"] *= 1.01
    tampered.to_csv(root / "tampered.csv", index=False)
    (root / "tampered").mkdir()
    (root / "tampered" / "claims.csv").write_text((root / "tampered.csv").read_text())
    (root / "tampered" / "summary.csv").write_text((root / "tables" / "summary.csv").read_text())
    capsys.readouterr()
    assert main(["claims", *map(str, packed_files), "--out-dir", str(root / "third"), "--compare",
                 str(root / "tampered")]) == 2
    error = capsys.readouterr().err
    assert "claims.csv re-derived differs" in error and "row 0, column value" in error
    assert len(error.strip().splitlines()) == 1


def test_a_missing_records_file_or_table_is_one_line(tmp_path):
    with pytest.raises(DraftcountError, match="no records file"):
        rederive_tables([tmp_path / "none.jsonl.gz"], tmp_path)
    (tmp_path / "summary.csv").write_text("a\n1\n")
    with pytest.raises(DraftcountError, match="no table"):
        compare_tables([tmp_path / "summary.csv"], tmp_path / "elsewhere")


def test_first_difference_reads_numbers_within_tolerance_and_names_the_cell():
    table = pd.DataFrame({"claim": ["sd", "eagle"], "value": [1.0, float("nan")]})
    assert first_difference(table, table.assign(value=[1.0 + 1e-9, float("nan")])) == ""
    assert first_difference(table, table.assign(value=[1.1, float("nan")])) == "row 0, column value: 1.0 against 1.1"
    assert first_difference(table, table.assign(claim=["sd", "reuse"])).startswith("row 1, column claim")
    assert first_difference(table, table.iloc[:1]) == "2 rows against 1"
    assert first_difference(table, table.rename(columns={"value": "v"})).startswith("columns differ")


@pytest.mark.skipif(not COMMITTED, reason="no committed records (results/**/records) in this checkout")
@pytest.mark.parametrize("records,tables", COMMITTED, ids=[str(records.relative_to(ROOT)) for records, _ in COMMITTED])
def test_the_committed_records_rederive_the_committed_tables(records, tables, tmp_path):
    written = rederive_tables(published(records), tmp_path)
    compare_tables(written, tables)
