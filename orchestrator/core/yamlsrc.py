"""Read YAML while remembering where every value came from (file, line, raw text).

Why not plain ``yaml.safe_load``: PyYAML turns ``on``/``off``/``yes``/``no`` into booleans, even as
mapping keys (a level named ``on`` would become ``True``), rounds ``0.10`` to ``0.1``, silently keeps
the last of two duplicate keys, and forgets line numbers, so errors could not say
``matrices/x.yaml:12``. Here:

- mapping keys are always their raw text;
- plain scalars that YAML 1.1 reads as booleans stay Python ``bool`` (the matrix decides how a
  boolean is written into an env file: ``1``/``0`` by default);
- numbers keep their raw text (``"0.10"``); pydantic converts them where a number is expected;
- duplicate keys are errors;
- every value's position is kept in a :class:`SourceMap` keyed by its path;
- libyaml (PyYAML's C parser, ~14x faster: every orch start parses a matrix and an inventory)
  parses when PyYAML has it; whatever libyaml refuses is parsed again by PyYAML's own parser, so
  what is accepted and every error message are PyYAML's;
- input is bounded before it is trusted: a regular file of at most 1 MiB (never /dev/zero or a
  FIFO), nesting at most MAX_DEPTH deep (checked on the parser's events, before the recursive
  composer runs), at most MAX_NODES values once aliases are expanded (an alias bomb of 9 nested
  9-fold aliases is 400 million values from 300 bytes), and no alias inside its own anchor;
- a document with anchors is measured first (each distinct node once): one over MAX_NODES is
  walked without building again what an alias repeats, so a bomb is refused in milliseconds,
  not after 100,000 values were built (~1 CPU-s), with the same error at the same place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.core.bounded import MAX_CONFIG_BYTES, read_bounded_text
from orchestrator.core.sourcemap import PathKey, Position, SourceMap, dotted
from orchestrator.errors import ConfigError

_BOOL_TAG = "tag:yaml.org,2002:bool"
_NULL_TAG = "tag:yaml.org,2002:null"
_STR_TAG = "tag:yaml.org,2002:str"
_NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
_COLLECTION_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}
_TRUE_WORDS = {"true", "yes", "on", "y"}
MAX_DEPTH = 64  # nested mappings/lists; a matrix needs about 6
MAX_NODES = 100_000  # values after alias expansion; a large matrix has a few thousand
_PURE: type[yaml.SafeLoader] = yaml.SafeLoader
FAST: type[Any] | None = getattr(yaml, "CSafeLoader", None)  # None: PyYAML built without libyaml


def load_yaml(path: Path, display: str | None = None) -> tuple[Any, SourceMap]:
    """Load one YAML document from path with positions; ConfigError on any problem."""
    shown = display or str(path)
    text = read_bounded_text(path, MAX_CONFIG_BYTES, shown)
    return parse_yaml(text, shown)


def parse_yaml(text: str, file: str) -> tuple[Any, SourceMap]:
    source = SourceMap(file, text=text)
    nodes = _compose(text, file)
    if len(nodes) != 1 or nodes[0] is None:
        found = "no document" if not nodes or nodes[0] is None else f"{len(nodes)} documents"
        raise ConfigError(f"expected one YAML mapping, found {found}", file=file, line=1)
    converter = _Converter(source)
    if "&" in text:  # no anchor, no alias: every node is built once, nothing to measure
        converter.expanded = _Sizes().over_limit(nodes[0])
    return converter.convert(nodes[0], ()), source


def _compose(text: str, file: str) -> list[yaml.Node]:
    """The document's nodes, by libyaml when there is one (nesting checked first either way)."""
    if FAST is not None:
        try:
            _check_depth(text, file, FAST)
            return list(yaml.compose_all(text, Loader=FAST))
        except yaml.YAMLError:
            pass  # PyYAML's own parser decides, and words the error as it always has
    try:
        _check_depth(text, file, _PURE)
        return list(yaml.compose_all(text, Loader=_PURE))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context
        hint = _tab_hint(mark) if problem and "'\\t'" in problem else None
        raise ConfigError(f"invalid YAML: {problem}", file=file, line=line, hint=hint) from None
    except yaml.reader.ReaderError as exc:  # a NUL or another character YAML forbids: no mark, a position
        line = text.count("\n", 0, exc.position) + 1
        char = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        raise ConfigError(f"invalid YAML: character {char} is not allowed", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=file) from None


# PyYAML says "found character '\t' that cannot start any token": the fix in the user's words.
TAB_HINT = "indent with spaces: YAML does not allow a tab there"


def _tab_hint(mark: yaml.Mark | None) -> str:
    """TAB_HINT with where the tab is: a tab among spaces looks like them, so the line alone
    leaves the user hunting for it."""
    if mark is None:
        return TAB_HINT
    return f"{TAB_HINT}; the tab is at line {mark.line + 1}, column {mark.column + 1}"


def _check_depth(text: str, file: str, loader: type[Any]) -> None:
    """Refuse nesting deeper than MAX_DEPTH from the parser's event stream (the parser keeps an
    explicit stack; the composer and the converter recurse, and 10,000 levels overflow them)."""
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else None
                raise ConfigError(
                    f"nesting deeper than {MAX_DEPTH} levels", file=file, line=line, hint="flatten the document"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


class _Converter:
    """Nodes -> Python values with positions, counting every value it builds (aliases expand)."""

    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.built = 0
        self.open: set[int] = set()  # ids of the collections being converted (an alias cycle)
        # Set when the document is known to expand past MAX_NODES: it will be refused, so a
        # collection already converted once (no error inside it) is counted, not built again,
        # when it fits in what is left and cannot nest too deep; the walk then fails where
        # building every value would have, with the same ancestors' positions for its line.
        self.expanded: _Sizes | None = None
        self.done: set[int] = set()  # ids of collections converted once without an error

    def convert(self, node: yaml.Node, path: PathKey) -> Any:
        self.built += 1
        if self.built > MAX_NODES:
            raise self.source.error(
                path, f"more than {MAX_NODES} values once aliases are expanded", "an alias bomb? write values out"
            )
        if len(path) > MAX_DEPTH:
            raise self.source.error(path, f"nesting deeper than {MAX_DEPTH} levels", "flatten the document")
        if id(node) in self.open:
            raise self.source.error(path, "an alias refers to its own anchor (a cycle)", "write the values out")
        if not isinstance(node, yaml.CollectionNode):
            return _convert(node, path, self.source, self)
        if self.expanded is not None and id(node) in self.done:
            size, height = self.expanded.size[id(node)], self.expanded.height[id(node)]
            if self.built + size - 1 <= MAX_NODES and len(path) + height <= MAX_DEPTH:
                self.built += size - 1  # its values, counted as building them would; the document fails later
                self.source.positions[path] = Position(node.start_mark.line + 1, "")
                return None
        self.open.add(id(node))
        try:
            value = _convert(node, path, self.source, self)
        finally:
            self.open.discard(id(node))
        if self.expanded is not None:
            self.done.add(id(node))
        return value


class _Sizes:
    """Each node's value count once aliases are expanded (itself and its values, keys not counted:
    what _Converter counts) and its height, each distinct node measured once."""

    def __init__(self) -> None:
        self.size: dict[int, int] = {}
        self.height: dict[int, int] = {}

    def over_limit(self, root: yaml.Node) -> _Sizes | None:
        """self if the document expands past MAX_NODES; None if not, or if it has a cycle or
        nests past MAX_DEPTH (the converter finds those)."""
        try:
            return self if self._measure(root, 0, set()) > MAX_NODES else None
        except _Unmeasured:
            return None

    def _measure(self, node: yaml.Node, depth: int, stack: set[int]) -> int:
        key = id(node)
        if key in self.size:
            return self.size[key]
        if depth > MAX_DEPTH or key in stack:
            raise _Unmeasured
        children = _children(node)
        stack.add(key)
        sizes = [self._measure(child, depth + 1, stack) for child in children]
        stack.discard(key)
        self.height[key] = 1 + max((self.height[id(c)] for c in children), default=-1)
        self.size[key] = 1 + sum(sizes)
        return self.size[key]


class _Unmeasured(Exception):
    """A cycle or a nesting past MAX_DEPTH: left to the converter, which refuses it."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    """The nodes _Converter.convert is called on below node: a mapping's values, a list's items."""
    if isinstance(node, yaml.MappingNode):
        return [value for _, value in node.value]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _convert(node: yaml.Node, path: PathKey, source: SourceMap, conv: _Converter) -> Any:
    source.positions[path] = Position(node.start_mark.line + 1, _raw(node))
    if isinstance(node, yaml.CollectionNode) and node.tag not in _COLLECTION_TAGS:
        raise source.error(path, f"unsupported YAML type {node.tag}", "write a plain mapping or list")
    if isinstance(node, yaml.MappingNode):
        return _convert_mapping(node, path, source, conv)
    if isinstance(node, yaml.SequenceNode):
        return [conv.convert(item, (*path, i)) for i, item in enumerate(node.value)]
    if isinstance(node, yaml.ScalarNode):
        return _convert_scalar(node, path, source)
    raise source.error(path, f"unsupported YAML node {type(node).__name__}", "write a mapping, a list or a scalar")


def _convert_mapping(node: yaml.MappingNode, path: PathKey, source: SourceMap, conv: _Converter) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise source.error(path, "YAML merge keys (<<) are not supported", "write the keys out")
        if not isinstance(key_node, yaml.ScalarNode):
            raise source.error(path, "mapping keys must be plain names")
        key = str(key_node.value)
        if key in out:
            line = key_node.start_mark.line + 1
            first = source.positions[(*path, key)].line
            raise ConfigError(
                f"duplicate key {key!r} (first defined on line {first})",
                file=source.file,
                line=line,
                path=dotted((*path, key)),
            )
        out[key] = conv.convert(value_node, (*path, key))
        # Errors about an entry point at its key's line: a block value starts on the next line.
        value_pos = source.positions[(*path, key)]
        source.positions[(*path, key)] = Position(key_node.start_mark.line + 1, value_pos.raw)
    return out


def _convert_scalar(node: yaml.ScalarNode, path: PathKey, source: SourceMap) -> Any:
    tag, value = node.tag, node.value
    if node.style:  # quoted or block scalar: always the literal string (plain: None, or "" from libyaml)
        return value
    if tag == _BOOL_TAG:
        return value.lower() in _TRUE_WORDS
    if tag == _NULL_TAG:
        return None
    if tag in _NUMBER_TAGS or tag == _STR_TAG:
        return value
    raise source.error(path, f"unsupported YAML type {tag}")


def _raw(node: yaml.Node) -> str:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else ""
