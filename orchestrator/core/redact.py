"""PURE: what counts as a secret, and masking it, in one place for every output orch writes
(journal, report, run.json, plan.json, `orch plan`, exports, repro output, error messages).

Secret by name: a variable or flag whose name ends in the part TOKEN, KEY or APIKEY (parts are
split at `_`, `-`, `.` and camelCase, so `HF_TOKEN`, `--api-key`, `apiKey` are secret but
`--max-tokens`, `token_usage`, `TOKENIZER_PATH` and `KV_KEYS` are not: they count or name
tokens), or that contains SECRET, PASSWORD, PASSWD or CREDENTIAL anywhere, or that the matrix
declares (`secrets: [HF_HUB_AUTH]`).

Secret by value, whatever it is called: `Authorization: Bearer ...` (and any `Bearer <token>`),
Hugging Face `hf_...`, OpenAI-style `sk-...`, GitHub `ghp_...`/`github_pat_...`, Slack `xox.-...`
and AWS `AKIA...` keys, the password of `scheme://user:password@host`, and the literal values a
matrix assigns to its secret variables (a repro that echoes its token is masked too).

Masked text reads "••••"; the units still get the real values.

The declared names and known values travel as a `Redactor` value (the matrix's, or the one a
run's manifest recorded: names only, never values), not as process state: a queue or a server
handles several runs in one process, and one run's declarations must neither leak into nor go
missing from another's outputs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

REDACTED = "••••"
_WORDS = r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL"
# a candidate: any name mentioning a secret word (Redactor.is_secret_name then decides by parts)
SECRET_NAME = re.compile(_WORDS, re.IGNORECASE)
_SECRET_PARTS = frozenset({"token", "key", "apikey", "accesskey", "privatekey", "authtoken", "accesstoken"})
_SECRET_ANYWHERE = re.compile(r"SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_PART_SPLIT = re.compile(r"[^A-Za-z0-9]+")
# a whole run of name characters that mentions a secret word; tried only where a run starts,
# so a long run (a megabyte of repro output) is scanned once, not once per character
_SECRET_WORD = rf"(?<![A-Za-z0-9_.-])(?=[A-Za-z0-9_.-]*?(?:{_WORDS}))[A-Za-z0-9_.-]+"
# an unquoted value stops at a quote or backslash: inside a JSON string (a journal line) the
# mask must not swallow the string's end
_VALUE = r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,;{}\[\]\"\\]+)"
# NAME=value, NAME: value, "NAME": "value" (JSON), only for secret-looking names (so an ordinary
# assignment never swallows the text after it)
_ASSIGNMENT = re.compile(rf"(?P<name>{_SECRET_WORD})(?P<sep>[\"']?\s*[=:]\s*){_VALUE}", re.IGNORECASE)
# --api-key VALUE (a CLI flag followed by its value)
_FLAG_WORD = rf"(?<![A-Za-z0-9_.-])(?=-[A-Za-z0-9_.-]*?(?:{_WORDS}))[A-Za-z0-9_.-]+"
# a value already masked (a known secret, or one masked where it was shown) is kept with what
# follows it (`args(+--api-key ••••)'`): read as a bare value it took the `)'` with it
_MASKED = rf"{REDACTED}(?=[)\]}}]*(?:[\s\"'\\,;]|$))"
_FLAG_VALUE = re.compile(
    rf"(?P<name>{_FLAG_WORD})(?P<sep>\s+)"
    rf"(?P<value>{_MASKED}|\\\"[^\"\\\n]*\\\"|\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\\-][^\s\"\\]*)",
    re.IGNORECASE,
)
# Authorization: Bearer xyz / "authorization": "Basic xyz" / Authorization=xyz
_AUTH_HEADER = re.compile(
    r"(?P<head>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?)"
    r"(?P<value>[^\s\"'\\,;]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<head>\bbearer\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
# well-known token shapes; sk- needs a digit or a capital so ordinary hyphenated words stay
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    r"hf_[A-Za-z0-9]{16,}"
    r"|sk-(?=[A-Za-z0-9_-]*[0-9A-Z])[A-Za-z0-9_-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r")"
)
# scheme://user:password@host: the password goes, the user and host stay
_URL_CREDENTIALS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s/:@]{0,256}:)(?P<value>[^\s/@]{1,512})@")
_NAME_WORDS = ("token", "key", "secret", "passw", "credential")
_SHAPE_PREFIXES = ("hf_", "sk-", "gh", "github_pat_", "xox", "AKIA")
MIN_KNOWN_VALUE = 6  # shorter secret values are not searched for in free text (they would mask "1")


def secret_name(name: str) -> bool:
    """PURE: whether a variable or flag name looks secret by itself (see the module doc)."""
    if _SECRET_ANYWHERE.search(name):
        return True
    if not SECRET_NAME.search(name):
        return False
    last = _PART_SPLIT.split(_CAMEL.sub("_", name).lower().strip("_.-"))[-1]
    return last in _SECRET_PARTS or last.endswith("apikey")


@dataclass(frozen=True)
class Redactor:
    """Masks secret values: those of secret-looking names, of the `declared` names, the `known`
    literal values (a sweep's own secrets, never stored), and secret-shaped values anywhere.
    `Redactor()` knows only the patterns; `Redactor.for_names(matrix.secrets)` adds a matrix's
    declarations."""

    declared: frozenset[str] = frozenset()
    known: frozenset[str] = field(default=frozenset(), repr=False)
    # derived once: a sweep masks every trial's env and texts with the same redactor
    _declared_assignment: re.Pattern[str] | None = field(init=False, compare=False, repr=False)
    _known_values: re.Pattern[str] | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        pattern = None
        if self.declared:  # declared names need not look secret: match exactly these, as words
            names = "|".join(re.escape(n) for n in sorted(self.declared, key=lambda n: (-len(n), n)))
            # a word of its own, or right after an escaped line break (a JSON string: "...\\nNAME=v")
            start = r"(?:(?<![A-Za-z0-9_])|(?<=\\[ntr]))"
            pattern = re.compile(rf"(?P<name>{start}(?:{names})\b)(?P<sep>[\"']?\s*[=:]\s*){_VALUE}")
        object.__setattr__(self, "_declared_assignment", pattern)
        values = sorted((v for v in self.known if len(v) >= MIN_KNOWN_VALUE), key=lambda v: (-len(v), v))
        known = re.compile("|".join(re.escape(v) for v in values)) if values else None
        object.__setattr__(self, "_known_values", known)

    @classmethod
    def for_names(cls, names: Iterable[str], values: Iterable[str] = ()) -> Redactor:
        return cls(frozenset(names), frozenset(values))

    def is_secret_name(self, name: str) -> bool:
        return name in self.declared or secret_name(name)

    def value(self, name: str, value: str) -> str:
        """The value as it may be shown: masked whole when `name` is secret, else its
        secret-shaped parts masked (a bearer token in an ordinary variable)."""
        return REDACTED if self.is_secret_name(name) else self.text(value)

    def text(self, text: str) -> str:
        """Mask secrets in free text (YAML, env lines, commands, repro output, logs)."""
        if self._known_values is not None:
            text = self._known_values.sub(REDACTED, text)

        def mask(match: re.Match[str]) -> str:
            if not self.is_secret_name(match.group("name")):
                return match.group(0)
            return _masked_assignment(match)

        lowered = text.lower()  # cheap substring checks skip the patterns that cannot match
        if any(word in lowered for word in _NAME_WORDS):
            text = _FLAG_VALUE.sub(mask, _ASSIGNMENT.sub(mask, text))
        if self._declared_assignment is not None:
            text = self._declared_assignment.sub(_masked_assignment, text)
        if "authorization" in lowered:
            text = _AUTH_HEADER.sub(_keep_head, text)
        if "bearer" in lowered:
            text = _BEARER.sub(_keep_head, text)
        if "://" in text:
            text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('head')}{REDACTED}@", text)
        if any(prefix in text for prefix in _SHAPE_PREFIXES):
            text = _TOKEN_SHAPES.sub(REDACTED, text)
        return text

    def changes(self, text: str) -> bool:
        """Whether showing `text` would mask part of it (a level name that holds a token)."""
        return self.text(text) != text


def _masked_assignment(match: re.Match[str]) -> str:
    """NAME=•••• — a quoted value keeps its quotes, so masked JSON and YAML still parse."""
    value = match.group("value")
    quote = '\\"' if value.startswith('\\"') else value[0] if value[0] in "\"'" else ""
    return f"{match.group('name')}{match.group('sep')}{quote}{REDACTED}{quote}"


def _keep_head(match: re.Match[str]) -> str:
    value = match.group("value")
    return match.group(0) if value == REDACTED else f"{match.group('head')}{REDACTED}"
