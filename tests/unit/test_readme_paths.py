"""A newcomer opens the files README.md and bench/README.md name: every module path
(`orchestrator/core/x.py`) and dotted module (`orchestrator.core.x.decide`) they quote must exist,
so a module moved to another package takes its mentions along (README once sent readers to
`orchestrator/sequential.py`, which had moved to orchestrator/core/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "bench/README.md")
FILE = re.compile(r"\b(?:orchestrator|bench|tests|matrices|inventory)/[\w/.-]*\.(?:py|yaml)\b")
DOTTED = re.compile(r"\borchestrator(?:\.\w+)+")


def quoted(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    return sorted({(doc, m.group(0)) for doc in DOCS for m in pattern.finditer((REPO / doc).read_text())})


def module_of(dotted: str) -> Path | None:
    """The file of the longest prefix of `dotted` that is a module (`orchestrator.core.sequential.decide`:
    orchestrator/core/sequential.py), provided at most one name (an attribute) follows it. Read
    from the tree, nothing imported."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:end])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path if end >= len(parts) - 1 else None
    return None


@pytest.mark.parametrize(("doc", "path"), quoted(FILE))
def test_every_file_the_readmes_name_exists(doc: str, path: str) -> None:
    if path in ("inventory/my-cluster.yaml", "matrices/x.yaml", "matrices/m.yaml"):  # the user's own files
        return
    assert (REPO / path).is_file(), f"{doc} names {path}, which is not in the checkout"


@pytest.mark.parametrize(("doc", "dotted"), quoted(DOTTED))
def test_every_module_the_readmes_name_exists(doc: str, dotted: str) -> None:
    assert module_of(dotted) is not None, f"{doc} names {dotted}, which is no module (or module.attribute)"
