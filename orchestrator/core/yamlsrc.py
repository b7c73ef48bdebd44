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
- every value's position is kept in a :class:`SourceMap` keyed by its path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.errors import ConfigError

PathKey = tuple[str | int, ...]

_BOOL_TAG = "tag:yaml.org,2002:bool"
_NULL_TAG = "tag:yaml.org,2002:null"
_STR_TAG = "tag:yaml.org,2002:str"
_NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
_TRUE_WORDS = {"true", "yes", "on", "y"}


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    raw: str  # the scalar's source text, or "" for collections


@dataclass
class SourceMap:
    """Where each value of a loaded document came from."""

    file: str
    positions: dict[PathKey, Position] = field(default_factory=dict)

    def line_of(self, path: PathKey) -> int | None:
        """Line of the value at path, or of its nearest known ancestor."""
        for cut in range(len(path), -1, -1):
            pos = self.positions.get(tuple(path[:cut]))
            if pos is not None:
                return pos.line
        return None

    def raw_of(self, path: PathKey) -> str | None:
        pos = self.positions.get(tuple(path))
        return pos.raw if pos is not None and pos.raw else None

    def error(self, path: PathKey, message: str, hint: str | None = None) -> ConfigError:
        return ConfigError(message, file=self.file, line=self.line_of(path), path=dotted(path), hint=hint)


def dotted(path: PathKey) -> str:
    """factors.overlap.levels[0] style key path for messages."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def load_yaml(path: Path, display: str | None = None) -> tuple[Any, SourceMap]:
    """Load one YAML document from path with positions; ConfigError on any problem."""
    shown = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", file=shown) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=shown) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=shown) from None
    return parse_yaml(text, shown)


def parse_yaml(text: str, file: str) -> tuple[Any, SourceMap]:
    source = SourceMap(file)
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError(f"invalid YAML: {exc.problem or exc.context}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=file) from None
    if len(nodes) != 1 or nodes[0] is None:
        found = "no document" if not nodes or nodes[0] is None else f"{len(nodes)} documents"
        raise ConfigError(f"expected one YAML mapping, found {found}", file=file, line=1)
    return _convert(nodes[0], (), source), source


def _convert(node: yaml.Node, path: PathKey, source: SourceMap) -> Any:
    source.positions[path] = Position(node.start_mark.line + 1, _raw(node))
    if isinstance(node, yaml.MappingNode):
        return _convert_mapping(node, path, source)
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), source) for i, item in enumerate(node.value)]
    if isinstance(node, yaml.ScalarNode):
        return _convert_scalar(node, path, source)
    raise source.error(path, f"unsupported YAML node {type(node).__name__}", "write a mapping, a list or a scalar")


def _convert_mapping(node: yaml.MappingNode, path: PathKey, source: SourceMap) -> dict[str, Any]:
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
        out[key] = _convert(value_node, (*path, key), source)
        # Errors about an entry point at its key's line: a block value starts on the next line.
        value_pos = source.positions[(*path, key)]
        source.positions[(*path, key)] = Position(key_node.start_mark.line + 1, value_pos.raw)
    return out


def _convert_scalar(node: yaml.ScalarNode, path: PathKey, source: SourceMap) -> Any:
    tag, value = node.tag, node.value
    if node.style is not None:  # quoted or block scalar: always the literal string
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
