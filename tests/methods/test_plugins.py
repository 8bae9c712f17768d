"""A method from another package (docs/extending.md, *A method from another package*): the page's `peek`, built as the
package `draftcount_peek` in a temporary folder and installed as pip would install it (the package and its dist-info,
with the page's entry points, on the path), is listed by `python -m harness methods`, trained and run lossless by the
CLI, planned by the workflow and checked by the conformance suite, as a catalog method is (with its draft vocabulary,
which its entry declares); a copy of it that books no drafter work (`peek_unbooked`) fails the suite's drafter-work
and drafter-FLOP checks. A broken or clashing plug-in is one line naming
its package."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from harness.data.token_streams import save_tokens
from harness.store.records import read_records
from tests.helpers import ROOT, docs_example

PAGE = (ROOT / "docs" / "extending.md").read_text()
GROUP = "draftcount.methods"
# the page's peek with its DrafterWork booking taken out: what the conformance suite must catch
UNBOOKED = ('\nUNBOOKED = Entry("peek_unbooked", "draftcount_peek.unbooked", "peek without its drafter-work booking", '
            '"drafter", None, "draftcount_peek:PeekOptions")\n')


def install(site: Path, distribution: str, files: dict[str, str], points: dict[str, str]) -> None:
    """``files`` (paths under ``site``) and the dist-info pip writes for ``distribution``: its metadata and its entry
    points in the group ``draftcount.methods``."""
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    info = site / f"{distribution.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n" + "".join(f"{key} = {value}\n" for key, value in
                                                                    points.items()))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The page's package (its `__init__.py`: the options and the entry; its `method.py`), and `peek_unbooked`."""
    site = tmp_path_factory.mktemp("plugins") / "site"
    project = tomllib.loads(docs_example(PAGE, "Its `pyproject.toml`:", "toml"))["project"]
    method = docs_example(PAGE, "`methods/peek/method.py`:").replace("from methods.peek import",
                                                                     "from draftcount_peek import")
    kept = [line for line in method.splitlines() if "self.work" not in line and "DrafterWork" not in line]
    assert len(kept) == len(method.splitlines()) - 4  # the import, the booker, its charge and its settle
    unbooked = "\n".join(kept) + "\n"
    init = (docs_example(PAGE, "`methods/peek/__init__.py`:") + "\n"
            + docs_example(PAGE, "and at the end of `draftcount_peek/__init__.py`") + UNBOOKED)
    install(site, project["name"], {"draftcount_peek/__init__.py": init, "draftcount_peek/method.py": method,
                                    "draftcount_peek/unbooked.py": unbooked},
            {**project["entry-points"][GROUP], "peek_unbooked": "draftcount_peek:UNBOOKED"})
    return site


def run(site: Path, *args: str, cwd: Path = ROOT, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    """``python *args`` with the plug-in installed (its folder on the path)."""
    environment = {**os.environ, "PYTHONPATH": str(site), **env}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=timeout)


def test_methods_lists_the_plugin(site):
    result = run(site, "-m", "harness", "methods")
    assert result.returncode == 0, result.stderr
    assert re.search(r"^peek +toy: one linear head .*needs --drafter.*plug-in: package draftcount-peek.*\[options: "
                     r"top_k=3\]", result.stdout, re.M), result.stdout
    assert re.search(r"^eagle ", result.stdout, re.M) and "peek_unbooked" in result.stdout  # beside the catalog's
    help_text = " ".join(run(site, "-m", "harness", "train", "--help").stdout.split())
    assert re.search(r"a method with a trained drafter: eagle, .*dream, peek, peek_unbooked", help_text), help_text


def test_the_plugin_trains_and_runs_lossless(site, model_dirs, tmp_path):
    save_tokens(tmp_path / "tokens.pt", torch.randint(0, 250, (4096,), generator=torch.Generator().manual_seed(0)))
    target = str(model_dirs["target"])
    trained = run(site, "-m", "harness", "train", "--method", "peek", "--target", target, "--data",
                  str(tmp_path / "tokens.pt"), "--heldout", str(tmp_path / "tokens.pt"), "--out",
                  str(tmp_path / "peek"), "--steps", "5", "--opt", "seq_len=32", "--no-progress")
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "heldout_top1_agreement_by_step" in trained.stdout and (tmp_path / "peek" / "model.safetensors").is_file()
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def add(a, b):\nThe quick brown fox\nfor i in range(10):\n")
    out = tmp_path / "peek.jsonl"
    result = run(site, "-m", "harness", "run", "--method", "peek", "--target", target, "--drafter",
                 str(tmp_path / "peek"), "--prompts", str(prompts), "--max-new-tokens", "16", "--pair-with-ar",
                 "--out", str(out), "--no-progress")
    assert result.returncode == 0, result.stderr[-2000:]
    pairs: dict[str, dict] = {}
    for record in read_records(out):
        pairs.setdefault(record["pair_id"], {})[record["method"]] = record
    assert len(pairs) == 3
    for pair in pairs.values():
        assert pair["peek"]["output_ids"] == pair["ar"]["output_ids"]  # greedy: lossless
        assert pair["peek"]["method_details"]["top_k"] == 3


def test_the_workflow_plans_its_targets(site, tmp_path):
    result = run(site, "-m", "snakemake", "-n", "-p", "bench_peek", "--config", f"work_dir={tmp_path / 'work'}",
                 f"results_dir={tmp_path / 'results'}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"^bench +4$", result.stdout, re.M) and re.search(r"^train_drafter +1$", result.stdout, re.M)
    assert "harness train --method peek" in result.stdout.replace("'", "")


PER_METHOD = ("greedy_output_equals_ar", "useful_drafter_work_is_booked", "drafter_flops_booked_are_those_it_ran",
              "batches_keep_every_row_lossless_or_are_refused", "at_most_one_host_read_per_step",
              "ops_outside_graphs_per_step_within_budget",
              "sampled_distribution_equals_the_target", "a_trained_drafter_records_its_agreement_per_draft_step",
              "greedy_output_on_a_hybrid_target_equals_ar", "greedy_output_with_an_image_equals_ar")


def test_the_conformance_suite_selects_the_plugins(site):
    """``DRAFTCOUNT_CONFORMANCE_METHODS=plugins`` collects every file's checks for the plug-ins' methods (and their
    hedgespec pairs), the draft-vocabulary case of the one whose entry declares ``draft_vocab`` (`peek`), and nothing
    else."""
    result = run(site, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/methods/conformance",
                 DRAFTCOUNT_CONFORMANCE_METHODS="plugins")
    assert result.returncode == 0, result.stdout[-3000:]
    collected = re.findall(r"::(test_\w+\[[^\]]+\])$", result.stdout, re.M)
    peek = [test for test in collected if re.search(r"[\[:,]peek[\],]", test)]
    assert len(peek) == 17, peek  # 10 checks of its own, hedgespec beside pld: greedy, drafter work, drafter FLOPs
    # x 2, sampling
    assert {f"test_{test}[peek]" for test in PER_METHOD} <= set(peek)
    vocab = sorted(test for test in collected if test.endswith("[peek+vocab]"))  # peek declares draft_vocab
    assert vocab == ["test_drafter_flops_booked_are_those_it_ran[peek+vocab]", "test_greedy_output_equals_ar[peek+vocab]",
                     "test_useful_drafter_work_is_booked[peek+vocab]"], vocab
    assert all("peek" in test for test in collected) and len(collected) == 2 * len(peek) + len(vocab)  # and
    # peek_unbooked's, which declares none


@pytest.mark.slow
def test_the_conformance_suite_checks_the_plugin(site):
    """The greedy file's checks run for the plug-ins: `peek` passes them all, with its draft vocabulary too;
    `peek_unbooked`, alone and as hedgespec's expert, fails the drafter-work and drafter-FLOP checks and passes the
    others."""
    result = run(site, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/methods/conformance/test_greedy.py",
                 DRAFTCOUNT_CONFORMANCE_METHODS="plugins")
    outcomes = dict(re.findall(r"::(test_\w+\[[^\]]+\]) (PASSED|FAILED|SKIPPED)", result.stdout))
    peek = {test: outcome for test, outcome in outcomes.items() if re.search(r"[\[:,]peek[\],]", test)}
    vocab = {test: outcome for test, outcome in outcomes.items() if test.endswith("[peek+vocab]")}
    assert len(peek) == 13 and set(peek.values()) == {"PASSED"}, result.stdout[-4000:]
    assert len(vocab) == 3 and set(vocab.values()) == {"PASSED"}, result.stdout[-4000:]
    failed = sorted(test for test, outcome in outcomes.items() if outcome == "FAILED")
    assert len(outcomes) == 29 and failed == sorted(
        f"test_{test}[{case}]" for test in ("useful_drafter_work_is_booked", "drafter_flops_booked_are_those_it_ran")
        for case in ("hedgespec:peek_unbooked,pld", "hedgespec:pld,peek_unbooked", "peek_unbooked")), \
        result.stdout[-4000:]
    assert "peek_unbooked had" in result.stdout and "booked no useful drafter work" in result.stdout
    assert "peek_unbooked booked 0.0% of the drafter FLOPs it ran" in result.stdout


@pytest.mark.parametrize("case", ["clash", "missing_module", "not_an_entry"])
def test_a_broken_or_clashing_plugin_is_one_line_naming_its_package(tmp_path, case):
    module, points = {
        "clash": ('from harness.catalog import Entry\nENTRY = Entry("eagle", "bad_toys", "a second eagle")\n',
                  {"eagle": "bad_toys:ENTRY"}),
        "missing_module": ("", {"nope": "bad_toys.missing:ENTRY"}),
        "not_an_entry": ("ENTRY = 42\n", {"nope": "bad_toys:ENTRY"}),
    }[case]
    install(tmp_path, "bad-toys", {"bad_toys/__init__.py": module}, points)
    result = run(tmp_path, "-m", "harness", "methods", "--names-only")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "package 'bad-toys'" in lines[0], result.stderr
    assert {"clash": "clashes with method 'eagle' of the catalog", "missing_module": "does not load",
            "not_an_entry": "is a int, not a harness.catalog.Entry"}[case] in lines[0]
