"""Measurement: where a Snakemake run's time went, from the run's own logs (``.snakemake/log/*.snakemake.log``).

A workflow that runs for hours is stopped and resumed (a machine shared, a session's end): its wall time is then not
one number. What is: each job's time from its start to its end, read from the logs of every invocation. A job that
finished counts once (its finished attempt); attempts that ended in an error or were cut off by a stop are listed
apart (``interrupted``): a job that resumes from checkpoints (the answers' shards, the draft LM) spent some of them
usefully, a drafter restarted from step 0 did not. ``--pauses`` names a file of intervals during which the run's
processes were stopped (SIGSTOP .. SIGCONT; one ``START END`` pair of ISO times a line): they are taken out of the
jobs that ran across them.

Prints per rule the jobs finished and their job-minutes, the total and what it gives over ``--cores`` (the run's
length were the cores always busy), and writes the table as CSV with ``--out``.

    python -m harness measure workflow-time --logs /work/real-run/.snakemake/log --pauses pauses.txt --out time.csv
"""

from __future__ import annotations

import argparse
import csv
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from harness.errors import DraftcountError

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
START = re.compile(r"^(?:local)?rule (\S+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\S+)\)$")
ERROR = re.compile(r"^Error in rule (\S+):$")


@dataclass(frozen=True)
class JobSpan:
    """One attempt of one job: its rule, its start and end (None: cut off with no line saying so), how it ended."""

    rule: str
    start: datetime
    end: datetime | None
    status: str  # "finished", "error" or "cut"
    log: str

    def seconds(self, pauses: list[tuple[datetime, datetime]]) -> float | None:
        if self.end is None:
            return None
        paused = sum(max(0.0, (min(self.end, stop) - max(self.start, begin)).total_seconds())
                     for begin, stop in pauses)
        return (self.end - self.start).total_seconds() - paused


def parse_stamp(text: str) -> datetime:
    return datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")


def job_spans(text: str, log: str = "") -> list[JobSpan]:
    """Every job attempt one Snakemake log records (jobids are per invocation: one log, one numbering)."""
    started: dict[int, tuple[str, datetime]] = {}
    spans: list[JobSpan] = []
    stamp: datetime | None = None
    pending_rule: str | None = None  # a "rule X:" or "Error in rule X:" block waiting for its jobid line
    pending_kind = ""
    for line in text.splitlines():
        if match := STAMP.match(line):
            stamp, pending_rule = parse_stamp(match.group(1)), None
        elif stamp is None:
            continue
        elif match := START.match(line):
            pending_rule, pending_kind = match.group(1), "start"
        elif match := ERROR.match(line):
            pending_rule, pending_kind = match.group(1), "error"
        elif match := FINISHED.match(line):
            job = int(match.group(1))
            if job in started:
                rule, begin = started.pop(job)
                spans.append(JobSpan(rule, begin, stamp, "finished", log))
        elif pending_rule is not None and (match := JOBID.match(line)):
            job = int(match.group(1))
            if pending_kind == "start":
                started[job] = (pending_rule, stamp)
            elif job in started:
                rule, begin = started.pop(job)
                spans.append(JobSpan(rule, begin, stamp, "error", log))
            pending_rule = None
    spans.extend(JobSpan(rule, begin, None, "cut", log) for rule, begin in started.values())
    return spans


def read_pauses(path: Path) -> list[tuple[datetime, datetime]]:
    """``START END`` ISO pairs, one a line (# comments and blank lines skipped)."""
    pauses = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("#")[0].split()
        if not fields:
            continue
        try:
            begin, stop = (datetime.fromisoformat(field) for field in fields)
        except ValueError:
            raise DraftcountError(f"{path}:{number}: expected 'START END' (two ISO times), got {line.strip()!r}")
        if stop < begin:
            raise DraftcountError(f"{path}:{number}: the pause ends before it starts")
        pauses.append((begin.replace(tzinfo=None), stop.replace(tzinfo=None)))
    return pauses


def rule_table(spans: list[JobSpan], pauses: list[tuple[datetime, datetime]]) -> list[dict[str, object]]:
    """Per rule: jobs finished, their minutes, and the interrupted attempts' (those with a known end), the
    longest job first."""
    rows: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "job_minutes": 0.0, "interrupted": 0,
                                                             "interrupted_minutes": 0.0})
    for span in spans:
        row = rows[span.rule]
        seconds = span.seconds(pauses)
        if span.status == "finished":
            row["jobs"] += 1
            row["job_minutes"] += seconds / 60
        else:
            row["interrupted"] += 1
            row["interrupted_minutes"] += (seconds or 0.0) / 60
    table = [{"rule": rule, **{key: round(value, 2) if isinstance(value, float) else value
                                for key, value in row.items()}} for rule, row in rows.items()]
    return sorted(table, key=lambda row: -row["job_minutes"])


def main(argv: list[str] | None = None, prog: str | None = None) -> int | None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logs", required=True, nargs="+", help="Snakemake log files, or folders of them")
    parser.add_argument("--pauses", help="a file of 'START END' ISO pairs: intervals the run was stopped")
    parser.add_argument("--cores", type=int, default=2, help="the cores the run had (the total over them)")
    parser.add_argument("--out", help="the table as CSV")
    args = parser.parse_args(argv)
    files = []
    for name in args.logs:
        path = Path(name)
        if not path.exists():
            raise DraftcountError(f"--logs {name}: no such file or folder")
        files += sorted(path.glob("*.snakemake.log")) if path.is_dir() else [path]
    if not files:
        raise DraftcountError(f"--logs {' '.join(args.logs)}: no *.snakemake.log files")
    if args.cores < 1:
        raise DraftcountError("--cores must be at least 1")
    pauses = read_pauses(Path(args.pauses)) if args.pauses else []
    spans = [span for path in files for span in job_spans(path.read_text(errors="replace"), path.name)]
    table = rule_table(spans, pauses)
    total = sum(row["job_minutes"] for row in table)
    lost = sum(row["interrupted_minutes"] for row in table)
    print(f"{'rule':<32} {'jobs':>5} {'job-min':>9} {'interrupted':>12} {'int-min':>8}")
    for row in table:
        print(f"{row['rule']:<32} {row['jobs']:>5} {row['job_minutes']:>9.1f} {row['interrupted']:>12} "
              f"{row['interrupted_minutes']:>8.1f}")
    cut = sum(1 for span in spans if span.status == "cut")
    print(f"finished jobs: {sum(row['jobs'] for row in table)}, {total:.1f} job-minutes = {total / args.cores:.1f} "
          f"min over {args.cores} cores; interrupted attempts {lost:.1f} job-minutes more"
          + (f" (and {cut} cut off with no end in the logs)" if cut else "") + f"; {len(files)} logs, "
          f"{len(pauses)} pauses taken out")
    if args.out:
        with open(args.out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(table[0]) if table else ["rule"])
            writer.writeheader()
            writer.writerows(table)
    return 0
