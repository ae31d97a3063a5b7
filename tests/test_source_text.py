"""Product code states a rule and one figure with the results file it comes from; it does not
say where or when it was measured relative to whoever wrote it (those histories belong in
bench/results/**/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[1] / "src" / "kernforge"
SUFFIXES = (".py", ".c", ".cu", ".h", ".cpp", ".html", ".js", ".css")
# Words that mean "the machine I wrote this on" or "the day I measured", which a reader cannot
# resolve: a machine is named by what it is (a 2-core x86 CPU, an H200), a date not at all. A
# date inside a name (a model id such as gpt-4.1-2025-04-14) is a name, not a date.
RELATIVE = [r"this project's", r"this (?:2|two)-core", r"this VM", r"measured here", r"\(here\)", r"on this box",
            r"(?<![-\w])20\d\d-\d\d-\d\d(?![-\w])"]


def test_no_machine_relative_words_or_dates_in_the_product_code():
    pattern = re.compile("|".join(RELATIVE), re.IGNORECASE)
    found = [f"{path.relative_to(SRC)}:{n}: {line.strip()[:100]}"
             for path in sorted(SRC.rglob("*")) if path.suffix in SUFFIXES and "vendor" not in path.parts
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if pattern.search(line)]
    assert not found, "\n".join(found)
