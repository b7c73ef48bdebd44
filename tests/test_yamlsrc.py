"""core.yamlsrc reads with libyaml (PyYAML's C parser) when PyYAML has it, and with PyYAML's own
parser otherwise or when libyaml refuses a document. Both must give the same values, the same
positions and, for a bad document, the same error: these tests compare the two on the shipped
files, on documents written to catch the known differences (libyaml marks a plain scalar's style
"" where PyYAML says None, words its errors differently, counts bytes where PyYAML counts
characters) and on random documents."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.core import yamlsrc
from orchestrator.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted([*ROOT.glob("matrices/*.yaml"), *ROOT.glob("inventory/*.yaml")])

GOOD = {
    "styles": "plain: on\nsingle: 'on'\ndouble: \"off\"\nlit: |\n  on\n  two\nfold: >\n  a\n  b\nnull: ~\nempty:\n",
    "numbers": "a: 0.10\nb: 1e3\nc: 007\nd: -0\ne: .inf\nf: 0x1F\n",
    "flow": "f: {a: [1, 2, {b: yes}], 'c d': no}\ng: [on, off, 'on']\n",
    "anchors": "base: &b {x: 1, y: [on, 2]}\nuse: *b\nlist: [*b, *b]\n",
    "unicode": "é: ünïcödé\nkey: 'ça va'\nemoji: \"\\u00e9\"\n",
    "comments": "# top\na: 1  # trailing\n\nb:\n  # inside\n  - x\n  - y\n",
    "multiline plain": "a: this is\n  one plain\n  scalar\nb: 2\n",
}
BAD = {
    "mapping in a value": "a: b: c\n",
    "open flow": "a: [1, 2\n",
    "NUL": "x: 1\n\x00y: 2\n",
    "control char after a non-ASCII one": "é: 1\n\x07: 2\n",
    "tab indent": "a:\n\t- b\n",
    "list then mapping": "- a\nb: 1\n",
    "open quote": "a: 'x\n",
    "duplicate key": "a: 1\nb: 2\na: 3\n",
    "two documents": "a: 1\n---\nb: 2\n",
    "no document": "# nothing\n",
    "merge key": "base: &b {x: 1}\nuse:\n  <<: *b\n",
    "a tag": "a: !!binary aGk=\n",
    "too deep": "a: " + "[" * (yamlsrc.MAX_DEPTH + 1) + "]" * (yamlsrc.MAX_DEPTH + 1) + "\n",
    "alias cycle": "a: &x [*x]\n",
}

needs_libyaml = pytest.mark.skipif(yamlsrc.FAST is None, reason="PyYAML without libyaml: one parser only")


def parse(text: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[Any, Any]]:
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(yamlsrc, "FAST", None)
        data, source = yamlsrc.parse_yaml(text, "doc.yaml")
    return data, dict(source.positions)


def refusal(text: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(yamlsrc, "FAST", None)
        with pytest.raises(ConfigError) as caught:
            yamlsrc.parse_yaml(text, "doc.yaml")
    return f"{caught.value} (line {caught.value.line})"


@needs_libyaml
@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_files_read_the_same_by_both_parsers(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = path.read_text()
    assert parse(text, True, monkeypatch) == parse(text, False, monkeypatch)


@needs_libyaml
@pytest.mark.parametrize("text", GOOD.values(), ids=GOOD.keys())
def test_tricky_documents_read_the_same_by_both_parsers(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = parse(text, True, monkeypatch)
    assert fast == parse(text, False, monkeypatch)
    assert fast[1], "positions were recorded"


def test_quoted_and_block_scalars_stay_text_and_plain_booleans_do_not() -> None:
    data, source = yamlsrc.parse_yaml(GOOD["styles"], "doc.yaml")
    assert data["plain"] is True and data["single"] == "on" and data["double"] == "off"
    assert data["lit"] == "on\ntwo\n" and data["fold"] == "a b\n"
    assert data["null"] is None and data["empty"] is None
    assert source.line_of(("lit",)) == 4 and source.raw_of(("single",)) == "on"


@needs_libyaml
@pytest.mark.parametrize("text", BAD.values(), ids=BAD.keys())
def test_a_bad_document_is_refused_in_the_same_words_by_both(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert refusal(text, True, monkeypatch) == refusal(text, False, monkeypatch)


def test_a_refusal_names_the_line_and_the_character() -> None:
    with pytest.raises(ConfigError) as caught:
        yamlsrc.parse_yaml(BAD["control char after a non-ASCII one"], "doc.yaml")
    assert caught.value.line == 2 and "character U+0007 is not allowed" in str(caught.value)  # PyYAML's count
    with pytest.raises(ConfigError) as caught:
        yamlsrc.parse_yaml(BAD["tab indent"], "doc.yaml")
    assert caught.value.line == 2 and "'\\t'" in str(caught.value)  # libyaml alone does not name the tab


def test_libyaml_is_used_when_present() -> None:
    assert yamlsrc.FAST is getattr(yaml, "CSafeLoader", None)


SCALARS = st.one_of(
    st.sampled_from(["on", "off", "yes", "no", "0.10", "1e3", "null", "~", "", "a: b", "- x", "#", "'q'", "é"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12),
    st.integers(-(10**6), 10**6),
    st.booleans(),
    st.none(),
)
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=4),
    max_leaves=20,
)


@needs_libyaml
@settings(max_examples=150, deadline=None)
@given(
    doc=st.dictionaries(st.text(min_size=1, max_size=8), DOCS, min_size=1, max_size=5),
    flow=st.sampled_from([None, True, False]),
    style=st.sampled_from([None, "'", '"', "|"]),
)
def test_random_documents_read_the_same_by_both_parsers(
    doc: dict[str, Any], flow: bool | None, style: str | None
) -> None:
    text = yaml.safe_dump(doc, default_flow_style=flow, default_style=style, allow_unicode=True)
    with pytest.MonkeyPatch.context() as monkeypatch:
        try:
            fast: object = parse(text, True, monkeypatch)
        except ConfigError as exc:
            fast = str(exc)
        try:
            pure: object = parse(text, False, monkeypatch)
        except ConfigError as exc:
            pure = str(exc)
    assert fast == pure


# ------------------------------------------------------------------ alias expansion, measured first
def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _outcome(text: str) -> tuple[Any, ...]:
    """What parse_yaml gives: the value and every position, or the error's words, line and path."""
    try:
        value, source = yamlsrc.parse_yaml(text, "m.yaml")
    except ConfigError as err:
        return ("refused", str(err), err.line, err.path)
    return ("read", value, source.positions)


def _plain(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """The same, building every value (the document not measured first)."""
    with monkeypatch.context() as m:
        m.setattr(yamlsrc._Sizes, "over_limit", lambda self, root: None)
        return _outcome(text)


def test_an_alias_bomb_is_refused_without_building_its_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """9 nested 9-fold aliases (400 million values): refused with the error building values gives,
    at the same value, after building a few dozen of them, not MAX_NODES (~0.2 CPU-s each time)."""
    plain = _plain(_bomb(), monkeypatch)
    built = []
    convert = yamlsrc._convert
    monkeypatch.setattr(yamlsrc, "_convert", lambda *a: built.append(1) or convert(*a))
    assert _outcome(_bomb()) == plain
    assert plain[0] == "refused" and "more than 100000 values once aliases are expanded" in plain[1]
    assert len(built) < 1_000, len(built)


def _random_document(rng: random.Random) -> str:
    """Top-level keys, each a list or mapping that may carry an anchor and alias earlier ones, with
    now and then what the converter refuses (a duplicate key, a merge key, an unsupported tag)."""
    anchors: list[str] = []

    def item(depth: int) -> str:
        roll = rng.random()
        if anchors and roll < 0.45:
            return f"*{rng.choice(anchors)}"
        if depth < 3 and roll < 0.75:
            inner = [item(depth + 1) for _ in range(rng.randint(1, 4))]
            return (
                f"[{', '.join(inner)}]"
                if rng.random() < 0.6
                else "{" + ", ".join(f"k{j}: {v}" for j, v in enumerate(inner)) + "}"
            )
        return rng.choice(
            ["x", "on", "1.0", "'q'"] * 20 + ["{p: 1, p: 2}", "{<<: {a: 1}}", "!!binary aGk=", "!!set {a}"]
        )

    lines = []
    for i in range(rng.randint(2, 9)):
        body = [item(1) for _ in range(rng.randint(1, 5))]
        anchor = f"&a{i} " if rng.random() < 0.8 else ""
        lines.append(f"k{i}: {anchor}[{', '.join(body)}]")
        if anchor:
            anchors.append(f"a{i}")
    return "\n".join(lines) + "\n"


def test_a_document_measured_first_reads_or_fails_as_building_every_value_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random documents with anchors, under a budget of 60 values and 7 levels (so many are over
    one or the other): measured first, each gives the value and positions, or the error, line and
    path, that building every value gives (a refusal inside an alias, a cycle-free repeat too deep,
    an earlier error than the count)."""
    monkeypatch.setattr(yamlsrc, "MAX_NODES", 60)
    monkeypatch.setattr(yamlsrc, "MAX_DEPTH", 7)
    rng = random.Random(20261206)
    kinds: dict[str, int] = {}
    for _ in range(600):
        text = _random_document(rng)
        want = _plain(text, monkeypatch)
        assert _outcome(text) == want, text
        kind = "count" if "once aliases" in str(want[1]) else str(want[0])
        kinds[kind] = kinds.get(kind, 0) + 1
    assert min(kinds.get(k, 0) for k in ("read", "refused", "count")) >= 30, kinds  # every path exercised


@pytest.mark.parametrize(
    ("text", "line", "column"), [("a:\n  b: 1\n\tc: 2\n", 3, 1), ("a:\n  b:\n    - x\n    \t- y\n", 4, 5)]
)
def test_a_tab_is_said_with_its_line_and_column(text: str, line: int, column: int) -> None:
    """An editor's tab among spaces is invisible: the column says where on the line it is."""
    with pytest.raises(ConfigError) as caught:
        yamlsrc.parse_yaml(text, "inv.yaml")
    said = str(caught.value)
    assert said.startswith(f"inv.yaml:{line}: invalid YAML")
    assert f"indent with spaces: YAML does not allow a tab there; the tab is at line {line}, column {column}" in said
