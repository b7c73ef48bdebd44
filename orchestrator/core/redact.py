"""PURE: what counts as a secret, and masking it, in one place for every output orch writes
(journal, report, run.json, `orch plan`, error messages).

A variable is secret when its name contains TOKEN, KEY, SECRET, PASSWORD, PASSWD or CREDENTIAL
(case-insensitive). Its value is shown as "••••"; the units still get the real value.
"""

from __future__ import annotations

import re
from typing import Iterable

REDACTED = "••••"
_WORDS = r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL"
SECRET_NAME = re.compile(_WORDS, re.IGNORECASE)
_SECRET_WORD = rf"[A-Za-z0-9_.-]*(?:{_WORDS})[A-Za-z0-9_.-]*"
# NAME=value, NAME: value, "NAME": "value" (JSON), only for secret-looking names (so an ordinary
# assignment never swallows the text after it)
_ASSIGNMENT = re.compile(
    rf"(?P<name>{_SECRET_WORD})(?P<sep>[\"']?\s*[=:]\s*)"
    r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,;{}\[\]]+)",
    re.IGNORECASE,
)
# --api-key VALUE (a CLI flag followed by its value)
_FLAG_VALUE = re.compile(rf"(?P<name>--?{_SECRET_WORD})(?P<sep>\s+)(?P<value>[^\s-][^\s]*)", re.IGNORECASE)


_DECLARED: set[str] = set()  # names a matrix declares secret (`secrets: [HF_HUB_AUTH]`)


def declare(names: "Iterable[str]") -> None:
    """Treat these variable names as secret too, for the rest of this process (a matrix's
    `secrets:` list, or the list a run's manifest recorded when its report is re-rendered)."""
    _DECLARED.update(names)


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) or name in _DECLARED


def redact_value(name: str, value: str) -> str:
    return REDACTED if is_secret_name(name) else value


def redact_text(text: str) -> str:
    """Mask values assigned to secret-looking names in free text (YAML, env lines, commands)."""

    def mask(match: re.Match[str]) -> str:
        if not is_secret_name(match.group("name")):
            return match.group(0)
        return f"{match.group('name')}{match.group('sep')}{REDACTED}"

    text = _FLAG_VALUE.sub(mask, _ASSIGNMENT.sub(mask, text))
    for name in sorted(_DECLARED):  # declared names need not look secret: mask their assignments
        declared = re.compile(
            rf"(?P<name>\b{re.escape(name)}\b)(?P<sep>[\"']?\s*[=:]\s*)"
            r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,;{}\[\]]+)"
        )
        text = declared.sub(lambda m: f"{m.group('name')}{m.group('sep')}{REDACTED}", text)
    return text


def declared_names() -> frozenset[str]:
    return frozenset(_DECLARED)
