"""Adding a method takes its own file (or folder) and one catalog entry: docs/extending.md's two toys, added to a
copy of the project -- `repeat` (model-free, one file) and `peek` (a trained drafter: its folder's two files) --
show up in `python -m harness methods`, in the workflow's plan (`peek` trained with its defaults, as no `drafters:`
entry names it) and in the conformance suite, with nothing else edited."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, copy_project, docs_example as _example


@pytest.fixture(scope="module")
def project_with_toy(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("toy") / "project"
    files = copy_project(copy)
    page = (copy / "docs" / "extending.md").read_text()
    (copy / "methods" / "repeat.py").write_text(_example(page, "`methods/repeat.py`:"))
    (copy / "methods" / "peek").mkdir()
    (copy / "methods" / "peek" / "__init__.py").write_text(_example(page, "`methods/peek/__init__.py`:"))
    (copy / "methods" / "peek" / "method.py").write_text(_example(page, "`methods/peek/method.py`:"))
    lines = [_example(page, "and in `methods/__init__.py`:").strip(),
             _example(page, "and its catalog entry in `methods/__init__.py`:").strip()]
    catalog = (copy / "methods" / "__init__.py").read_text()
    entries = "".join(f"\n    {line}" for line in lines)
    (copy / "methods" / "__init__.py").write_text(catalog.replace("\n)\n", f"{entries}\n)\n", 1))
    changed = [name for name in files if name.startswith(("harness/", "workflow/", "tests/", "Snakefile"))
               and (copy / name).read_bytes() != (ROOT / name).read_bytes()]
    assert not changed and lines[0].startswith('Entry("repeat"') and lines[1].startswith('Entry("peek"')
    return copy


def _run(project: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(project)}
    return subprocess.run([sys.executable, *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_new_method_is_listed(project_with_toy):
    result = _run(project_with_toy, "-m", "harness", "methods")
    assert result.returncode == 0, result.stderr
    assert re.search(r"^repeat +toy: a chain of copies .*\[options: depth=3\]", result.stdout, re.M), result.stdout
    assert re.search(r"^peek +toy: one linear head .*needs --drafter.*\[options: top_k=3\]", result.stdout, re.M), \
        result.stdout


def test_the_workflow_has_its_bench_target(project_with_toy, tmp_path):
    result = _run(project_with_toy, "-m", "snakemake", "-n", "-p", "bench_repeat", "--config",
                  f"work_dir={tmp_path / 'work'}", f"results_dir={tmp_path / 'results'}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"^bench +4$", result.stdout, re.M), result.stdout  # 2 datasets x 2 temperatures
    assert "--method repeat --variant repeat" in result.stdout.replace("'", "")


def test_the_trained_drafter_is_planned_with_its_defaults(project_with_toy, tmp_path):
    result = _run(project_with_toy, "-m", "snakemake", "-n", "-p", "bench_peek", "--config",
                  f"work_dir={tmp_path / 'work'}", f"results_dir={tmp_path / 'results'}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"^bench +4$", result.stdout, re.M) and re.search(r"^train_drafter +1$", result.stdout, re.M)
    shown = result.stdout.replace("'", "")
    assert "harness train --method peek" in shown and "--steps 1000" in shown  # the trainer's defaults
    assert f"--drafter {tmp_path / 'work' / 'drafters' / 'peek'}" in shown


@pytest.mark.slow
def test_the_conformance_suite_runs_it(project_with_toy):
    result = _run(project_with_toy, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                  "tests/methods/conformance", "-k", "repeat or peek")
    assert result.returncode == 0, result.stdout[-3000:]
    for toy in ("repeat", "peek"):  # greedy, sampling, host reads; and each as a hedgespec expert (greedy, drafter
        # work and drafter FLOPs: in either position; sampling: first, the learner's random picks giving it both roles)
        for test in ("greedy_output_equals_ar", "sampled_distribution_equals_the_target",
                     "at_most_one_host_read_per_step"):
            assert re.search(rf"test_{test}\[{toy}\] PASSED", result.stdout), (toy, test, result.stdout[-2000:])
        assert len(re.findall(rf"\[hedgespec:[a-z_,]*{toy}[a-z_,]*\] PASSED", result.stdout)) == 7, result.stdout[-2000:]
    assert re.search(r"test_greedy_output_equals_ar\[peek\+vocab\] PASSED", result.stdout)  # its entry: draft_vocab
