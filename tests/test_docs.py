"""The README stays a short front page, and its links into docs/ (and the guides' links to one
another, to their example files and to bench/) lead to files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MOST_LINES = 300  # the front page: what it does, the two commands, the everyday ones, the map
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def local_targets(page: Path) -> list[str]:
    """The page's relative link targets, without their #anchor (web addresses left out)."""
    targets = [m.group(1).split("#")[0] for m in LINK.finditer(page.read_text())]
    return [t for t in targets if t and not re.match(r"[a-z]+:", t)]


def test_readme_is_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= README_MOST_LINES


def test_readme_links_into_docs_resolve():
    links = [t for t in local_targets(README) if t.startswith("docs/")]
    assert [t for t in links if t.endswith(".md")], "the README links no docs/*.md page"
    assert [t for t in links if not (ROOT / t).exists()] == []


def test_every_docs_page_is_linked_from_the_readme():
    linked = {t for t in local_targets(README) if t.startswith("docs/")}
    assert sorted(f"docs/{p.name}" for p in DOCS.glob("*.md") if f"docs/{p.name}" not in linked) == []


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_docs_links_resolve(page: str):
    path = DOCS / page
    assert [t for t in local_targets(path) if not (path.parent / t).exists()] == []


def test_readme_keeps_the_two_commands():
    # scripts/optimize_example.sh and scripts/test.sh call themselves README commands 1 and 2,
    # and .ci/run runs "exactly the README's test command".
    text = README.read_text()
    assert "bash scripts/optimize_example.sh\n" in text and "bash scripts/test.sh\n" in text
