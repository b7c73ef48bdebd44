"""JSON as orch reads it from its run files and from servers: Unicode text only (pure).

Why: `json.loads` decodes bytes with 'surrogatepass' (an encoded lone surrogate, ED A0 80, comes
back as '\\ud800') and keeps a lone surrogate escape ('\\ud800' in the text) as it is. A string
holding one is no Unicode text: it cannot be written again (a page, a journal line, run.json: a
UnicodeEncodeError, and pydantic's serializer raises), so one damaged journal line crashed `orch
report` as it wrote the page, and a server that said such a version would have crashed the trial's
record. Refused where it is read instead, as what it is: not JSON text (a ValueError, as
json.loads' own errors are, so every reader's handling of bad JSON applies).
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins a valid pair: any one left is lone


def loads(data: bytes | str) -> Any:  # as json.loads: the caller checks the shape
    """json.loads of UTF-8 text; ValueError for bytes that are not UTF-8 or a lone surrogate in a
    string (RecursionError, as json.loads, for a value nested too deep)."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data  # strict: refuses ED A0 80
    value = json.loads(text)
    if "\\u" in text or "\\U" in text:  # only an escape can still hold one
        lone = _lone_surrogate(value)
        if lone is not None:
            raise ValueError(f"not Unicode text: a string holds a lone surrogate ({lone})")
    return value


def _lone_surrogate(value: object) -> str | None:
    """The first lone surrogate in any key or string of `value`, as an escape; None: there is none."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                return f"\\u{ord(found[0]):04x}"
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
    return None
