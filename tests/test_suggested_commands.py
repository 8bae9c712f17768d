"""Every command a message suggests works when pasted (issue 78, item 0): each ``python -m harness ...`` in a string
of harness/ or methods/ (an error's advice, a warning, a printed hint; docstrings aside) names a real subcommand,
and each flag it names is one that subcommand takes. The snakemake advice of the quality gate
(``--config allow_weak_models=true``) is pasted into a real run by tests/workflow/test_reproducible_zoo.py and planned
here."""

import ast
import re
from pathlib import Path

import pytest

from harness.cli import main
from tests.workflow.test_workflow import overrides, snakemake

ROOT = Path(__file__).resolve().parents[1]
COMMAND = re.compile(r"python -m harness ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?((?: --[a-z][a-z-]*)*)")
FLAG = re.compile(r"--[a-z][a-z-]*")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def suggested_commands() -> list[tuple[str, str]]:
    """(where, the suggested command line) for every message string that names ``python -m harness ...``."""
    found = []
    for path in sorted([*ROOT.glob("harness/**/*.py"), *ROOT.glob("methods/**/*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                for match in COMMAND.finditer(node.value):
                    found.append((f"{path.relative_to(ROOT)}:{node.lineno}", match.group(0)))
    return found


def help_text(words: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main([*words, "--help"])
    assert stop.value.code == 0, words
    return capsys.readouterr().out


def test_the_scan_finds_the_known_suggestions():
    commands = {command for _, command in suggested_commands()}
    assert "python -m harness measure chain-length" in commands and "python -m harness build-datastore" in commands


@pytest.mark.parametrize("where,command", suggested_commands())
def test_a_suggested_command_exists_with_its_flags(where, command, capsys):
    from harness.measure import MEASUREMENTS

    first, second, flags = COMMAND.fullmatch(command).groups()
    words = [first, second] if first == "measure" and second else [first]
    if first == "measure" and second not in MEASUREMENTS:
        words = ["measure"]  # "python -m harness measure" alone, or followed by prose
    text = help_text(words, capsys)
    for flag in FLAG.findall(flags or ""):
        assert flag in text, f"{where}: {command!r}: `{' '.join(words)}` takes no {flag}"


def test_the_gates_advice_plans_when_pasted(tmp_path):
    """`--config allow_weak_models=true`, as the gate's line says it: Snakemake passes `true` as a string, which the
    config coerces to the boolean the schema asks for (it failed validation before)."""
    from harness.training.gates import ADVICE

    advised = re.search(r"`--config (\S+)`", ADVICE).group(1)
    result = snakemake("-n", "--configfile", "workflow/config/default.yaml", "--config", *overrides(tmp_path)[1:],
                       advised)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
