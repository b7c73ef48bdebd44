"""Where each value of a loaded YAML document came from (file, line, raw text), so that any check,
however far from the reader, can say ``matrices/x.yaml:12``. Apart from core.yamlsrc (the reader)
so that the types that keep a SourceMap need not depend on the reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.errors import ConfigError

PathKey = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    raw: str  # the scalar's source text, or "" for collections


@dataclass
class SourceMap:
    """Where each value of a loaded document came from."""

    file: str
    positions: dict[PathKey, Position] = field(default_factory=dict)
    text: str = ""  # the document as read (once: the text hashed is the text parsed)

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
