"""A file orch cannot read as what it must be, in few words (pure).

Why its own module: run.json (store.manifest) and status.json (store.liveness) are both read by
every status view and the runs index, which list a damaged one with why; the two said it two ways
("not JSON at line 3 (...)" against "not valid JSON", with no line), from two copies of one rule.
"""

from __future__ import annotations

import re

import pydantic


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
    return f"not {kind} ({exc.error_count()} error(s), first: {where}: {first['msg']}{hint})"
