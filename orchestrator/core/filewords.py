"""A file orch cannot read as what it must be, in few words (pure).

Why its own module: run.json (store.manifest) and status.json (store.liveness) are both read by
every status view and the runs index, which list a damaged one with why; the two said it two ways
("not JSON at line 3 (...)" against "not valid JSON", with no line), from two copies of one rule.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]  # public since 2.6, not in typeshed's __all__

import pydantic

from orchestrator.core.words import counted

_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


def invalid_words(exc: pydantic.ValidationError, kind: str, hint: str = "") -> str:
    """A file that is not JSON, or not a `kind`, in few words: where the JSON breaks ("not JSON at
    line 3 (EOF while parsing a value, column 0)"), else the first wrong field and the count
    (pydantic's own run to a screenful); `hint` ends the second ("another orch version's?")."""
    first = exc.errors(include_url=False, include_input=False)[0]
    if first["type"] == "json_invalid":
        error = str((first.get("ctx") or {}).get("error", ""))
        at = re.search(r" at line (\d+) column (\d+)$", error)
        if at is None:
            return f"not JSON ({error})" if error else "not JSON"
        return f"not JSON at line {at[1]} ({error[: at.start()]}, column {at[2]})"
    where = ".".join(str(p) for p in first["loc"]) or "the whole file"
    return f"not {kind} ({counted(exc.error_count(), 'error')}, first: {where}: {first['msg']}{hint})"


def json_line(text: str, loc: tuple[int | str, ...]) -> int | None:
    """The line of `text` (JSON) where the value at `loc` (a pydantic error's path: keys and list
    indexes) starts; None when the path is not there as given or the text is not JSON there.
    Why: a run.json field of the wrong shape is refused naming its line, as a matrix's is; the
    keys along the path are read, each other value only skipped (json's own decoder)."""
    decoder = json.JSONDecoder()
    pos: int | None = _blank(text, 0)
    try:
        for step in loc:
            if pos is None:
                return None
            pos = _object_value(decoder, text, pos, step) if isinstance(step, str) else _item(decoder, text, pos, step)
    except (ValueError, IndexError, RecursionError):  # not JSON there, or nested past Python's stack
        return None
    return None if pos is None else text.count("\n", 0, pos) + 1


def _blank(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # \s* always matches


def _object_value(decoder: json.JSONDecoder, text: str, pos: int, key: str) -> int | None:
    """Where the value of `key` starts in the object at `pos` (its last, as json.loads keeps it)."""
    if text[pos] != "{":
        return None
    pos, found = _blank(text, pos + 1), None
    while text[pos] != "}":
        name, pos = scanstring(text, pos + 1)
        pos = _blank(text, pos)
        if text[pos] != ":":
            return None
        pos = _blank(text, pos + 1)
        if name == key:
            found = pos
        pos = _blank(text, decoder.raw_decode(text, pos)[1])
        if text[pos] == ",":
            pos = _blank(text, pos + 1)
    return found


def _item(decoder: json.JSONDecoder, text: str, pos: int, index: int) -> int | None:
    """Where item `index` of the list at `pos` starts."""
    if text[pos] != "[":
        return None
    pos = _blank(text, pos + 1)
    for _ in range(index):
        if text[pos] == "]":
            return None
        pos = _blank(text, decoder.raw_decode(text, pos)[1])
        if text[pos] == ",":
            pos = _blank(text, pos + 1)
    return None if text[pos] == "]" else pos
