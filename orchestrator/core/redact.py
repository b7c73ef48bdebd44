"""PURE: what counts as a secret, and masking it, in one place for every output orch writes
(journal, report, run.json, `orch plan`, error messages).

A variable is secret when its name contains TOKEN, KEY, SECRET, PASSWORD, PASSWD or CREDENTIAL
(case-insensitive), or when the matrix declares it (`secrets: [HF_HUB_AUTH]`). Its value is
shown as "••••"; the units still get the real value.

The declared names travel as a `Redactor` value (the matrix's, or the one a run's manifest
recorded), not as process state: a queue or a server handles several runs in one process, and
one run's declarations must neither leak into nor go missing from another's outputs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

REDACTED = "••••"
_WORDS = r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL"
SECRET_NAME = re.compile(_WORDS, re.IGNORECASE)
_SECRET_WORD = rf"[A-Za-z0-9_.-]*(?:{_WORDS})[A-Za-z0-9_.-]*"
_VALUE = r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,;{}\[\]]+)"
# NAME=value, NAME: value, "NAME": "value" (JSON), only for secret-looking names (so an ordinary
# assignment never swallows the text after it)
_ASSIGNMENT = re.compile(rf"(?P<name>{_SECRET_WORD})(?P<sep>[\"']?\s*[=:]\s*){_VALUE}", re.IGNORECASE)
# --api-key VALUE (a CLI flag followed by its value)
_FLAG_VALUE = re.compile(rf"(?P<name>--?{_SECRET_WORD})(?P<sep>\s+)(?P<value>[^\s-][^\s]*)", re.IGNORECASE)


@dataclass(frozen=True)
class Redactor:
    """Masks secret values: those of secret-looking names, and of the `declared` names.
    `Redactor()` knows only the name patterns; `Redactor.for_names(matrix.secrets)` adds a
    matrix's declarations."""

    declared: frozenset[str] = frozenset()
    # derived once: a sweep masks every trial's env and texts with the same redactor
    _declared_assignment: re.Pattern[str] | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        pattern = None
        if self.declared:  # declared names need not look secret: match exactly these, as words
            names = "|".join(re.escape(n) for n in sorted(self.declared, key=lambda n: (-len(n), n)))
            pattern = re.compile(rf"(?P<name>\b(?:{names})\b)(?P<sep>[\"']?\s*[=:]\s*){_VALUE}")
        object.__setattr__(self, "_declared_assignment", pattern)

    @classmethod
    def for_names(cls, names: Iterable[str]) -> Redactor:
        return cls(frozenset(names))

    def is_secret_name(self, name: str) -> bool:
        return name in self.declared or bool(SECRET_NAME.search(name))

    def value(self, name: str, value: str) -> str:
        """The value as it may be shown: masked when `name` is secret."""
        return REDACTED if self.is_secret_name(name) else value

    def text(self, text: str) -> str:
        """Mask values assigned to secret names in free text (YAML, env lines, commands)."""

        def mask(match: re.Match[str]) -> str:
            if not self.is_secret_name(match.group("name")):
                return match.group(0)
            return f"{match.group('name')}{match.group('sep')}{REDACTED}"

        text = _FLAG_VALUE.sub(mask, _ASSIGNMENT.sub(mask, text))
        if self._declared_assignment is not None:
            text = self._declared_assignment.sub(lambda m: f"{m.group('name')}{m.group('sep')}{REDACTED}", text)
        return text
