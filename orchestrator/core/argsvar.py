"""One command-line flag inside an args variable, edited in place (PURE).

SGLang takes most of its settings as command-line flags, and units pass them through one env
variable expanded in ``ExecStart`` (``SGLANG_EXTRA_ARGS="--tp 8 --disable-cuda-graph"``). A
factor that set the whole variable would clobber the other flags in it, and two factors could
not both touch it. So a flag factor owns one flag only: each of its levels adds, sets or
removes that flag, and the variable's other tokens (and how they are quoted) stay as the
original file has them. Several flag factors compose in one variable, whatever their order.

The variable is split the way a shell (and ``shlex``) splits it; tokens keep their source text,
so an edit changes only the flag's own tokens. New tokens are written with ``shlex.quote``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from orchestrator.core.redact import REDACTED
from orchestrator.errors import EnvFileError

FLAG_NAME = re.compile(r"\A--?[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
PRESENT = "present"  # a boolean flag's "on" level (the flag alone, e.g. --disable-cuda-graph)
ABSENT = "absent"  # the flag is removed (the server's default applies)


@dataclass(frozen=True, order=True)
class FlagSetting:
    """What one level does to one flag: `value` None removes it; a boolean flag's `value` is
    PRESENT; a valued flag's is its argument ("64" for --cuda-graph-max-bs 64)."""

    flag: str
    takes_value: bool  # occurrences are `--flag VALUE` / `--flag=VALUE`, not `--flag` alone
    value: str | None

    def tokens(self) -> list[str]:
        if self.value is None:
            return []
        return [self.flag, self.value] if self.takes_value else [self.flag]

    def describe(self) -> str:
        """`+--flag value` as the env file gets it: a value with a space is quoted, as written
        (`+--cuda-graph-max-bs 64 128` read as the value 64 and a stray 128; the file has '64 128').
        One holding a ' stays bare: shlex would split it apart, and the redactor, which masks a
        secret flag's quoted or bare value, would miss part of it. A masked value stays bare too."""
        if self.value is None:
            return f"-({self.flag})"
        shown = [t if "'" in t or t == REDACTED else shlex.quote(t) for t in self.tokens()]
        return "+" + " ".join(shown)


@dataclass(frozen=True)
class ArgsEdit:
    """The flags a cell sets inside one args variable (sorted by flag: the same settings give
    an equal edit, so the plan sees equal envs and restarts nothing)."""

    settings: tuple[FlagSetting, ...]

    def merged(self, other: ArgsEdit) -> ArgsEdit:
        return ArgsEdit(tuple(sorted({*self.settings, *other.settings})))

    def masked(self, secret: Callable[[str], bool]) -> ArgsEdit:
        """This edit with each secret flag's value masked, to be shown: masking the described text
        afterwards cannot tell where a bare value ends (`--api-key ab12)` lost its `)`)."""
        hidden = {s for s in self.settings if s.takes_value and s.value and secret(s.flag)}
        return ArgsEdit(tuple(replace(s, value=REDACTED) if s in hidden else s for s in self.settings))

    def describe(self) -> str:
        """`args(+--cuda-graph-max-bs 64 -(--disable-cuda-graph))`: for plans, journals, reports."""
        return "args(" + " ".join(s.describe() for s in self.settings) + ")"

    def __str__(self) -> str:
        return self.describe()

    def apply(self, text: str, where: str = "args variable") -> str:
        """`text` with each flag set as this edit says; other tokens untouched."""
        words = split_words(text, where)
        for setting in self.settings:
            words = _set_flag(words, setting)
        return "".join(words).strip() if not text.strip() else _keep_edges(text, "".join(words))


def resolve(assignments: Mapping[str, str | None | ArgsEdit], original: Mapping[str, str]) -> dict[str, str | None]:
    """A role's assignments as plain values: each args edit applied to the variable's ORIGINAL
    value (never to what an earlier cell wrote). An edit that leaves an absent variable empty
    leaves it absent."""
    out: dict[str, str | None] = {}
    for var, value in assignments.items():
        if isinstance(value, ArgsEdit):
            before = original.get(var)
            after = value.apply(before or "", f"{var}={before!r}")
            out[var] = None if before is None and after == "" else after
        else:
            out[var] = value
    return out


def unreachable(value: str, dialect: str) -> tuple[str, str] | None:
    """(what in it, why) a flag's `value`, written into an args variable, cannot reach the server
    as one argument; None when it can. Units pass the variable as `$VAR`, a word of its own:
    - systemd (ExecStart=) replaces it by "the value of the environment variable split at
      whitespace ... quotes are respected when splitting into words, and afterwards removed"
      (systemd.service, Command lines; EXTRACT_UNQUOTE), so the quotes orch writes (shlex.quote)
      keep a value with a space or a quote whole; but a backslash is an escape there, even inside
      single quotes, and is dropped;
    - a wrapper script that sources the file (dialect shell) and runs `server $VAR`: the shell
      splits the value at blanks and never reads quotes inside it, so a value orch must quote
      reaches the server cut up, its quotes as characters (`'64` and `128'`)."""
    if dialect != "shell":
        if "\\" in value:
            return (
                "a backslash",
                "systemd splits $VAR reading a backslash as an escape, even inside quotes, and drops it",
            )
        return None
    if shlex.quote(value) == value:
        return None
    odd = next(c for c in value if shlex.quote(c) != c)
    what = "a space" if any(c.isspace() for c in value) else _NAMED.get(odd, repr(odd))
    return what, (
        "the unit's wrapper script sources the env file (dialect: shell), and its $VAR splits the value "
        "at blanks and passes the quotes orch writes around it on as characters"
    )


_NAMED = {"'": "a quote", '"': "a quote", "\\": "a backslash"}


# ---------------------------------------------------------------- words with their source text
def split_words(text: str, where: str) -> list[str]:
    """The text as alternating pieces: blanks, then a word's source text (quotes included), ...
    Joining the pieces gives the text back. Quotes and backslashes follow POSIX shell rules."""
    pieces: list[str] = []
    i, n = 0, len(text)
    while i < n:
        j = i
        while j < n and text[j] in " \t\n":
            j += 1
        if j > i:
            pieces.append(text[i:j])
        if j == n:
            break
        k = _word_end(text, j, where)
        pieces.append(text[j:k])
        i = k
    return pieces


def _word_end(text: str, i: int, where: str) -> int:
    n = len(text)
    while i < n and text[i] not in " \t\n":
        c = text[i]
        if c == "\\":
            if i + 1 >= n:  # shlex refuses it too ("No escaped character"), as a bare ValueError
                raise _unsplittable(where, "a trailing backslash")
            i += 2
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise _unsplittable(where, "an unterminated ' quote")
            i = end + 1
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            if i >= n:
                raise _unsplittable(where, 'an unterminated " quote')
            i += 1
        else:
            i += 1
    return min(i, n)


def _unsplittable(where: str, what: str) -> EnvFileError:
    return EnvFileError(
        f"{where}: cannot split into words: {what}",
        hint="a flag factor edits a shell-style args variable; fix its quoting in the env file",
    )


def _word_value(piece: str) -> str:
    parts = shlex.split(piece)
    return parts[0] if parts else ""


def _is_blank(piece: str) -> bool:
    return piece[:1] in (" ", "\t", "\n")


def _set_flag(pieces: list[str], setting: FlagSetting) -> list[str]:
    """Remove every occurrence of the flag (with its argument, for a valued flag); put the new
    tokens where the first occurrence was, else at the end."""
    out: list[str] = []
    placed = False
    new = " ".join(shlex.quote(t) for t in setting.tokens())
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        if _is_blank(piece):
            out.append(piece)
            i += 1
            continue
        word = _word_value(piece)
        if word != setting.flag and not word.startswith(setting.flag + "="):
            out.append(piece)
            i += 1
            continue
        i += 1
        if setting.takes_value and word == setting.flag:  # skip its argument, if there is one
            k = i + 1 if i < len(pieces) and _is_blank(pieces[i]) else i
            if k < len(pieces) and not _word_value(pieces[k]).startswith("--"):
                i = k + 1
        if new and not placed:
            out.append(new)
            placed = True
        elif out and _is_blank(out[-1]):
            out.pop()  # the blank before a removed occurrence goes with it
    if new and not placed:
        while out and _is_blank(out[-1]):  # trailing blanks: _keep_edges puts them back after it
            out.pop()
        out += [" ", new] if out else [new]
    return out


def _keep_edges(original: str, edited: str) -> str:
    """Blanks at the ends of the original value stay as they were."""
    lead = original[: len(original) - len(original.lstrip())]
    trail = original[len(original.rstrip()) :]
    return lead + edited.strip() + trail
