"""No text orch shows says "cell(s)" (a guard, by reading the code): where the count is at hand,
core.words says "1 cell" / "3 cells" (`counted`, `listed`, the pages' `counted` filter).

Scanned: every string literal of orchestrator/*.py (f-strings' literal parts too; docstrings and
comments are for the reader of the code, not the user) and every template's text. "http(s)"
is a scheme, not a plural, and stays."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "orchestrator"
MAYBE_PLURAL = re.compile(r"[A-Za-z]\(s\)")
ALLOWED = ("http(s)",)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _said(text: str) -> list[str]:
    for allowed in ALLOWED:
        text = text.replace(allowed, "")
    return [text[max(m.start() - 30, 0) : m.end() + 10] for m in MAYBE_PLURAL.finditer(text)]


def maybe_plurals(source: str) -> list[str]:
    """Each "(s)" in a string literal of `source` (not a docstring), with a little context."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found += _said(node.value)
    return found


def test_the_scan_finds_what_it_looks_for() -> None:
    """The scan is not blind: a plain string and an f-string's literal part are found; a
    docstring, a comment, a call `f(s)` and "http(s)" are not."""
    source = '''
def f(s, n):
    """Counts cell(s)."""
    x = f(s)  # a comment's line(s)
    return "1 cell(s)", f"{n} trial attempt(s) failed", "an http(s) URL"
'''
    assert [hit.strip() for hit in maybe_plurals(source)] == ["1 cell(s)", "trial attempt(s) failed"]


def test_no_string_in_orchestrator_says_a_maybe_plural() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {hit!r}"
        for path in sorted(ROOT.rglob("*.py"))
        for hit in maybe_plurals(path.read_text(encoding="utf-8"))
    ]
    assert not found, "say it with core.words.counted / listed:\n" + "\n".join(found)


def test_no_template_says_a_maybe_plural() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {hit!r}"
        for path in sorted(ROOT.rglob("*.j2"))
        for hit in _said(path.read_text(encoding="utf-8"))
    ]
    assert not found, 'say it with {{ n | counted("cell") }}:\n' + "\n".join(found)
