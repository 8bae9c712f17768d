"""`python -m harness measure workflow-time`: job spans read from Snakemake's own log lines, attempts that did not
finish kept apart, stopped intervals taken out, bad input one line."""

from datetime import datetime

import pytest

from harness.cli import main
from harness.measure.workflow_time import job_spans, read_pauses, rule_table

LOG = """Building DAG of jobs...
Execute 2 jobs...
[Sun Nov 29 14:54:24 2026]
localrule regenerate:
    input: a
    output: b
    jobid: 7
    priority: 60
[Sun Nov 29 14:54:25 2026]
rule train_drafter:
    output: c
    jobid: 3
    wildcards: drafter=eagle
[Sun Nov 29 15:04:24 2026]
Finished jobid: 7 (Rule: regenerate)
1 of 3 steps (33%) done
[Sun Nov 29 15:04:25 2026]
localrule bench:
    jobid: 9
[Sun Nov 29 15:05:25 2026]
Error in rule train_drafter:
    message: None
    jobid: 3
"""


def test_spans_pair_starts_with_their_ends_and_keep_unfinished_attempts_apart():
    spans = {span.rule: span for span in job_spans(LOG, "one.log")}
    assert spans["regenerate"].status == "finished" and spans["regenerate"].seconds([]) == 600
    assert spans["train_drafter"].status == "error" and spans["train_drafter"].seconds([]) == 660
    assert spans["bench"].status == "cut" and spans["bench"].seconds([]) is None
    table = {row["rule"]: row for row in rule_table(list(spans.values()), [])}
    assert table["regenerate"]["jobs"] == 1 and table["regenerate"]["job_minutes"] == 10.0
    assert table["train_drafter"]["jobs"] == 0 and table["train_drafter"]["interrupted_minutes"] == 11.0


def test_a_pause_is_taken_out_of_the_jobs_running_across_it(tmp_path):
    pauses = tmp_path / "pauses.txt"
    pauses.write_text("# stopped\n2026-11-29T14:59:24 2026-11-29T15:01:24\n\n2026-11-29T16:00:00 2026-11-29T16:10:00\n")
    read = read_pauses(pauses)
    assert read[0] == (datetime(2026, 11, 29, 14, 59, 24), datetime(2026, 11, 29, 15, 1, 24))
    (regenerate,) = [span for span in job_spans(LOG) if span.rule == "regenerate"]
    assert regenerate.seconds(read) == 600 - 120  # the second pause lies after the job


def test_the_command_prints_the_total_over_the_cores_and_writes_the_table(tmp_path, capsys):
    folder = tmp_path / "log"
    folder.mkdir()
    (folder / "2026-11-29T145423.snakemake.log").write_text(LOG)
    assert main(["measure", "workflow-time", "--logs", str(folder), "--out", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr().out
    assert "finished jobs: 1, 10.0 job-minutes = 5.0 min over 2 cores" in out
    assert (tmp_path / "t.csv").read_text().splitlines()[0].startswith("rule,jobs,job_minutes")


@pytest.mark.parametrize("content,message", [("2026-11-29T14:59:24\n", "expected 'START END'"),
                                             ("2026-11-29T15:00 2026-11-29T14:00\n", "ends before it starts")])
def test_a_bad_pause_line_is_one_line(tmp_path, content, message):
    pauses = tmp_path / "p.txt"
    pauses.write_text(content)
    with pytest.raises(Exception, match=message) as error:
        read_pauses(pauses)
    assert "\n" not in str(error.value)


def test_missing_logs_are_one_line(tmp_path, capsys):
    assert main(["measure", "workflow-time", "--logs", str(tmp_path / "none")]) != 0
    assert "no such file or folder" in capsys.readouterr().err
