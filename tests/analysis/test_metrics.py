"""The metric table is the one definition of the summary's columns: the summary writes exactly them, the report
shows its labelled ones with their definitions, and docs/metrics.md is generated from it."""

import json
from pathlib import Path

import pandas as pd

from harness.analysis.metrics import METRICS, metrics_markdown, report_metrics, summary_columns
from harness.analysis.report import results_table
from harness.analysis.summary import records_frame, summarize
from tests.analysis.test_summary import _record

ROOT = Path(__file__).resolve().parents[2]


def _summary(tmp_path) -> pd.DataFrame:
    records = [_record("method", "sd", "a", 20, 1.0, 9, 12, 32, 8, 50, drafter_flops=800.0, useful=200.0),
               _record("baseline", "ar", "a", 20, 2.0, 20, 0, 0, 19, 29)]
    path = tmp_path / "sd.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return summarize(records_frame([path]))


def test_the_summary_writes_exactly_the_tables_columns(tmp_path):
    assert list(_summary(tmp_path).columns) == summary_columns()
    assert len({metric.name for metric in METRICS}) == len(METRICS)
    assert all(metric.formula and metric.definition for metric in METRICS)


def test_docs_metrics_page_is_the_generated_one_and_lists_every_column(tmp_path):
    page = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert page == metrics_markdown(), "docs/metrics.md is stale: python -m harness metrics --out docs/metrics.md"
    for column in _summary(tmp_path).columns:
        assert f"## `{column}`" in page, column


def test_report_table_uses_the_labelled_metrics(tmp_path):
    table = results_table(_summary(tmp_path))
    header = table.splitlines()[0]
    assert all(f" {metric.label} |" in header for metric in report_metrics())
    assert "drafter MFLOPs/accepted" in header and "95% interval" in header
