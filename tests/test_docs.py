"""The docs' form and what they promise: docs/*.md and the README keep their lines to 200 characters (the working
rule; a table row that would be longer moves its detail to a note below the table), and docs/extending.md lists every
check the conformance suite runs per method."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LONGEST = 200


def test_docs_lines_are_at_most_200_characters():
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    assert len(pages) > 5
    long = [f"{page.relative_to(ROOT)}:{number} ({len(line)} characters)" for page in pages
            for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1)
            if len(line) > LONGEST]
    assert not long, "lines over 200 characters: " + ", ".join(long)


def per_method_conformance_tests() -> list[str]:
    """The conformance suite's tests parametrized by ``method``: the checks each method gets."""
    names = []
    for path in sorted((ROOT / "tests" / "methods" / "conformance").glob("test_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and any(
                    decorator.args and isinstance(decorator.args[0], ast.Constant)
                    and decorator.args[0].value == "method"
                    for decorator in node.decorator_list if isinstance(decorator, ast.Call)):
                names.append(node.name)
    return names


def test_the_extending_page_lists_every_check_a_method_gets():
    page = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    section = page.split("### What the conformance suite checks", 1)[1].split("\n### ", 1)[0]
    tests = per_method_conformance_tests()
    assert len(tests) >= 12, tests
    missing = [name for name in tests if f"`{name}`" not in section]
    assert not missing, f"docs/extending.md, *What the conformance suite checks*, does not list {missing}"
