"""core.yamlsrc's limits hold and say where: nesting past MAX_DEPTH, written out or reached through
aliases, is refused with its file:line (exit 2), never a RecursionError out of PyYAML's composer or
our own walks; a collection of a type orch does not read, or a key that is not a name, is refused,
not read as a plain mapping; a list item's errors point at its own line. (Mutation round six: each
test here failed on a mutant the compare-both-parsers tests let through.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from orchestrator.core import yamlsrc
from orchestrator.errors import ConfigError


def _refused(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        yamlsrc.parse_yaml(text, "doc.yaml")
    assert caught.value.exit_code == 2
    return caught.value


@pytest.mark.parametrize("fast", [True, False], ids=["libyaml", "pyyaml"])
def test_a_document_nested_1000_deep_is_refused_at_its_line(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """libyaml gives up on 1,000 levels itself, so PyYAML's recursive composer would get it: the
    event-stream check must refuse it first, at the line where the 65th level opens."""
    if not fast:
        monkeypatch.setattr(yamlsrc, "FAST", None)
    text = "x: 1\ny:\n  z: " + "[" * 1000 + "]" * 1000 + "\n"
    assert str(_refused(text)).startswith("doc.yaml:3: nesting deeper than 64 levels (flatten the document)")


def test_nesting_in_a_file_is_refused_with_the_file_and_line(tmp_path: Path) -> None:
    """Level 1 is the top mapping (line 1), level n opens on line n + 1: the 65th on line 66."""
    deep = tmp_path / "m.yaml"
    deep.write_text("a: 1\n" + "".join("  " * i + f"k{i}:\n" for i in range(70)) + "  " * 70 + "v: 1\n")
    with pytest.raises(ConfigError) as caught:
        yamlsrc.load_yaml(deep, "matrices/m.yaml")
    assert str(caught.value).startswith("matrices/m.yaml:66: nesting deeper than 64 levels")


def _alias_chain(anchors: int, depth: int = 40) -> str:
    """Each anchor nests the previous one `depth` levels down: anchors x depth levels once the
    aliases are expanded, from a parser nesting of only `depth`."""
    lines = ["a0: &a0 " + "[" * depth + "1" + "]" * depth]
    lines += [f"a{i}: &a{i} " + "[" * depth + f"*a{i - 1}" + "]" * depth for i in range(1, anchors)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("anchors", [2, 30])
def test_aliases_that_nest_past_the_limit_are_refused(anchors: int) -> None:
    """The parser's nesting is 40 here; the converter must count the levels the aliases add (80,
    or 1,200: past Python's recursion limit for the measuring walk and the converter alike)."""
    error = _refused(_alias_chain(anchors))
    assert "nesting deeper than 64 levels" in str(error) and error.file == "doc.yaml" and error.line == 1


def test_aliases_within_the_limit_are_read() -> None:
    data, _ = yamlsrc.parse_yaml(_alias_chain(2, depth=20), "doc.yaml")
    inner = data["a1"]
    for _ in range(20):
        inner = inner[0]
    assert inner == data["a0"]


@pytest.mark.parametrize("tag", ["!!set {x, y}", "!!omap [{x: 1}]", "!!pairs [{x: 1}]"])
def test_a_collection_of_another_yaml_type_is_refused(tag: str) -> None:
    error = _refused(f"a: 1\nb:\n  c: {tag}\n")
    assert str(error).startswith("doc.yaml:3: b.c: unsupported YAML type tag:yaml.org,2002:")


def test_a_mapping_key_that_is_a_list_is_refused() -> None:
    error = _refused("a: 1\nb:\n  ? [1, 2]\n  : 3\n")
    assert str(error) == "doc.yaml:3: b: mapping keys must be plain names"


def test_a_list_item_keeps_its_own_line() -> None:
    _, source = yamlsrc.parse_yaml("a:\n  b:\n    - x\n    - y\n", "doc.yaml")
    assert [source.line_of(("a", "b", i)) for i in (0, 1)] == [3, 4]
    assert source.error(("a", "b", 1), "bad level").line == 4


def test_anchors_in_mapping_keys_aliased_deep_are_refused_not_measured_without_end() -> None:
    """The measuring walk visits values, not keys: an anchor on a list used as a key is first met
    through its alias, as deep as the aliases nest (1,200 levels here): the walk must give up past
    MAX_DEPTH, and the document is refused for its key at line 1, not a RecursionError."""
    lines = ["? &k0 " + "[" * 40 + "1" + "]" * 40, ": 0"]
    for i in range(1, 30):
        lines += [f"? &k{i} " + "[" * 40 + f"*k{i - 1}" + "]" * 40, f": {i}"]
    error = _refused("\n".join([*lines, "v: *k29"]) + "\n")
    assert str(error) == "doc.yaml:1: mapping keys must be plain names"


def test_without_libyaml_pyyamls_own_parser_reads_and_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PyYAML built without libyaml (no CSafeLoader): the module, loaded afresh, has no fast
    parser and reads and refuses with PyYAML's own."""
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    spec = importlib.util.spec_from_file_location("yamlsrc_without_libyaml", yamlsrc.__file__)
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    assert fresh.FAST is None
    assert fresh.parse_yaml("a: [1, {b: on}]\n", "doc.yaml")[0] == {"a": ["1", {"b": True}]}
    with pytest.raises(ConfigError, match=r"^doc\.yaml:2: nesting deeper than 64 levels"):
        fresh.parse_yaml("a: 1\nb: " + "[" * 100 + "]" * 100 + "\n", "doc.yaml")
