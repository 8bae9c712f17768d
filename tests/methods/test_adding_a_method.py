"""Adding a method takes one method file and one catalog line: docs/extending.md's toy method, added to a copy
of the project, shows up in `python -m harness methods`, in `snakemake -n bench_<name>` and in the conformance
suite, with nothing else edited."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _example(text: str, heading: str) -> str:
    """The first fenced python block after ``heading`` in the docs page."""
    rest = text.split(heading, 1)[1]
    return re.search(r"```python\n(.*?)```", rest, re.S).group(1)


@pytest.fixture(scope="module")
def project_with_toy(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("toy") / "project"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file() and not name.startswith("results/"):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    page = (copy / "docs" / "extending.md").read_text()
    module = _example(page, "`methods/repeat.py`:")
    line = _example(page, "and in `methods/__init__.py`:").strip()
    (copy / "methods" / "repeat.py").write_text(module)
    catalog = (copy / "methods" / "__init__.py").read_text()
    (copy / "methods" / "__init__.py").write_text(catalog.replace("\n)\n", f"\n    {line}\n)\n", 1))
    changed = [name for name in files if name.startswith(("harness/", "workflow/", "tests/", "Snakefile"))
               and (copy / name).read_bytes() != (ROOT / name).read_bytes()]
    assert not changed and line.startswith('Entry("repeat"')
    return copy


def _run(project: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(project)}
    return subprocess.run([sys.executable, *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_new_method_is_listed(project_with_toy):
    result = _run(project_with_toy, "-m", "harness", "methods")
    assert result.returncode == 0, result.stderr
    assert re.search(r"^repeat +toy: a chain of copies .*\[options: depth=3\]", result.stdout, re.M), result.stdout


def test_the_workflow_has_its_bench_target(project_with_toy, tmp_path):
    result = _run(project_with_toy, "-m", "snakemake", "-n", "-p", "bench_repeat", "--config",
                  f"work_dir={tmp_path / 'work'}", f"results_dir={tmp_path / 'results'}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"^bench +4$", result.stdout, re.M), result.stdout  # 2 datasets x 2 temperatures
    assert "--method repeat --variant repeat" in result.stdout.replace("'", "")


@pytest.mark.slow
def test_the_conformance_suite_runs_it(project_with_toy):
    result = _run(project_with_toy, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  "tests/methods/test_conformance.py", "-k", "repeat")
    assert result.returncode == 0, result.stdout[-3000:]
    assert re.search(r"\b2 passed\b", result.stdout), result.stdout[-2000:]
