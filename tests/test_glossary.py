"""One word per idea in the guide (the README and docs/), as CONTRIBUTING.md's glossary says.

Issue 21 found ideas sharing a word ("record" for appending outcomes and for the archive
whose copy makes trimming safe) and one idea under several (the stalled sweep). The code
keeps its old names until it is renamed; the text a user reads uses the glossary's word,
and names an old one only in quotes, to say what it was called.
"""

from __future__ import annotations

import re

from tests.support import ROOT

RETIRED = {
    "archive of record": "custodian",
    "stalled check": "stalled sweep",
    "stall check": "stalled sweep",
    "stalled scan": "stalled sweep",
}
"""A retired phrase, and the glossary's word for its idea."""

GUIDE = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def glossary() -> list[list[str]]:
    text = (ROOT / "CONTRIBUTING.md").read_text().partition("## Glossary")[2]
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]


def test_the_glossary_names_every_retired_phrase_and_its_word() -> None:
    rows = glossary()
    assert rows, "CONTRIBUTING.md has no glossary table"
    for phrase, word in RETIRED.items():
        assert any(phrase in row[2] and word in row[1] for row in rows), (phrase, word)


def test_the_guide_uses_the_glossarys_words() -> None:
    """The README said "the archive of record" for what the glossary calls the custodian."""
    found = []
    for page in GUIDE:
        text = re.sub(r'"[^"\n]*"', "", page.read_text())  # a quoted old name is allowed
        for phrase in RETIRED:
            for n, line in enumerate(text.splitlines(), 1):
                if phrase in line.lower():
                    found.append(f"{page.relative_to(ROOT)}:{n}: {phrase!r}")
    assert found == []
