"""The docs' form: docs/*.md and the README keep their lines to 200 characters (the working rule; a table row that
would be longer moves its detail to a note below the table)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LONGEST = 200


def test_docs_lines_are_at_most_200_characters():
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    assert len(pages) > 5
    long = [f"{page.relative_to(ROOT)}:{number} ({len(line)} characters)" for page in pages
            for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1) if len(line) > LONGEST]
    assert not long, "lines over 200 characters: " + ", ".join(long)
