"""Env files: read them the way their reader does, edit them without disturbing a byte (PURE).

Server flags live in env files, and two very different programs read them:

- ``systemd``: ``EnvironmentFile=`` (systemd 252). It drops ``export K=v`` lines as invalid
  assignments, treats ``#``/``;`` as comments only as the first non-blank character, trims blanks
  around ``=`` and unquoted values, honours quotes only at the start of a value, expands nothing,
  ends lines at CR as well as LF, lets a comment or value ending in ``\\`` swallow the next line,
  and refuses the whole file on a NUL or invalid UTF-8 in a key or value.
- ``shell``: a wrapper script running ``set -a; . FILE`` in bash. Blanks end words, ``#`` starts a
  comment at a word start, quotes work anywhere, ``$`` and backticks expand, CR is data, and a
  syntax error (a ``;`` comment line, say) stops bash reading the rest of the file.

Why a scanner per reader rather than a regex per line: an edit must land on the assignment the
reader will actually apply (the last one it sees), and whether a line is an assignment at all
depends on what came before it (a comment ending in ``\\``, an open quote, a syntax error). So
each dialect has one scanner that emulates its reader and records, for every assignment, where
its key and value sit in the text. ``read_values``, ``edit`` and ``lint`` all work from that
record, so they cannot disagree with each other.

Edits replace only the value span of the assignment the reader applies, so comments, order,
blank lines, ``export`` prefixes, untouched quoting, CRLF, trailing blanks and a missing final
newline all survive. Values are written in the one form both readers agree on
(``quote_value``). Text is ``str``; callers decode bytes with ``surrogateescape``, so foreign
bytes arrive as lone surrogates and survive untouched lines.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal, get_args

from orchestrator.core.bounds import ENV_ENTRY_HINT, ENV_ENTRY_TOO_LONG, MAX_ARG_BYTES
from orchestrator.errors import EnvFileError

__all__ = ["MAX_FILE_BYTES", "Dialect", "check_size", "edit", "lint", "quote_value", "read_values", "validate_name"]

Dialect = Literal["systemd", "shell"]
# What a reader, an edit or a lint parses at most. A parse holds ~170 bytes of objects per byte of
# the file and takes seconds a MiB (an 8 MB file: 1.3 GB and 26 s, and preflight edits a file once
# per distinct cell), while an env file is a few KiB: a bigger text is refused, never parsed.
MAX_FILE_BYTES = 256 * 1024

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_./:,@%+=-]+")
# Inside double quotes both readers drop the backslash before exactly these characters
# (systemd's SHELL_NEED_ESCAPE; bash's list adds newline, which orch never writes).
_DQ_ESCAPED = '"\\`$'


# ---------------------------------------------------------------- names and values


def validate_name(key: str) -> None:
    """Refuse names neither reader accepts, before anything is written.

    systemd silently drops an invalid name and bash runs it as a command, so a typo in a
    matrix would otherwise become a flag that was never set."""
    if not isinstance(key, str) or not _NAME.fullmatch(key):
        raise EnvFileError(
            f"{key!r}: not a valid env var name",
            hint="use letters, digits and _, not starting with a digit",
        )


def quote_value(value: str) -> str:
    """The one form both readers agree on: bare when every character is safe, else ``"..."``.

    Bare values use only ``[A-Za-z0-9_./:,@%+=-]`` so neither reader can see a quote, blank,
    comment, expansion or glob in them. Anything else goes in double quotes with ``\\``, ``"``,
    ``$`` and backtick escaped: systemd and bash both unescape exactly those inside double
    quotes, and neither expands anything once ``$`` and backtick are escaped."""
    _check_value(value, "value")
    if _SAFE_VALUE.fullmatch(value):
        return value
    escaped = "".join("\\" + ch if ch in _DQ_ESCAPED else ch for ch in value)
    return f'"{escaped}"'


def _check_value(value: str, where: str) -> None:
    """Values the readers cannot carry on one line of a file systemd accepts."""
    problem = ""
    if "\0" in value:
        problem = "contains a NUL byte"
    elif "\n" in value or "\r" in value:
        problem = "contains a line break"
    elif _bad_unicode(value):
        problem = "is not valid UTF-8 (or holds a Unicode noncharacter)"
    if problem:
        raise EnvFileError(
            f"{where} {value!r}: {problem}",
            hint="systemd refuses such env files and the unit fails to start; "
            "env files carry one line of UTF-8 text per value",
        )


def _bad_unicode(text: str) -> bool:
    """What systemd's utf8_is_valid() refuses: surrogates (our stand-in for undecodable bytes)
    and the Unicode noncharacters U+FDD0..U+FDEF and U+xxFFFE/U+xxFFFF."""
    for ch in text:
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF or 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE:
            return True
    return False


# ---------------------------------------------------------------- the scanners' common record


@dataclass(frozen=True)
class _Assign:
    """One assignment as its reader sees it, with where it sits in the text."""

    key: str  # systemd: the key as read, which may be invalid (``export K``)
    value: str | None  # None: needs a shell to evaluate (see ``problem``)
    line: int
    value_start: int  # the span edit() replaces
    value_end: int
    word_start: int  # the whole ``KEY=value`` (shell: for removing one of several words)
    problem: str = ""
    appends: bool = False  # shell ``KEY+=value``
    unterminated: bool = False  # the value runs to the end of the file inside a quote
    after_quote: bool = False  # systemd: text after a closing quote joins the value
    continued: bool = False  # the value continues on the next line (trailing backslash)
    comment_like: bool = False  # systemd: an unquoted ` #`/` ;` that systemd keeps as data
    expansion_like: bool = False  # systemd: an unescaped `$NAME`, `${`, `$(` or backtick


@dataclass(frozen=True)
class _Statement:
    """One command (shell) or one key=value entry (systemd)."""

    line: int
    kind: Literal["assign", "other", "invalid"]
    assigns: tuple[_Assign, ...]
    words: tuple[tuple[int, int], ...]  # spans of all words (shell), for removing one word
    line_span: tuple[int, int] | None  # the whole line(s), when this statement is alone on it
    note: str = ""


@dataclass(frozen=True)
class _Parsed:
    statements: tuple[_Statement, ...]
    notes: tuple[tuple[int, str], ...]  # (line, warning) found while scanning
    clean_end: bool  # a line appended now would be read as a line of its own
    stop_line: int | None = None  # shell: bash stops reading here (syntax error)
    stop_reason: str = ""

    def assigns(self, key: str) -> list[_Assign]:
        return [a for s in self.statements if s.kind == "assign" for a in s.assigns if a.key == key]


class _Lines:
    """Offset -> 1-based line number (lines end at LF, as editors and users count them)."""

    def __init__(self, text: str) -> None:
        self._breaks = [i for i, ch in enumerate(text) if ch == "\n"]

    def of(self, offset: int) -> int:
        return bisect_left(self._breaks, offset) + 1


def _line_start(text: str, offset: int) -> int:
    """Just after the last LF or CR before `offset`. The CR is looked for after the LF only: a
    search from the file's start, once per entry, made a file without CRs quadratic to read."""
    lf = text.rfind("\n", 0, offset)
    return max(lf, text.rfind("\r", lf + 1, offset)) + 1


# ---------------------------------------------------------------- systemd EnvironmentFile=

_SD_WHITESPACE = " \t\n\r"
_SD_NEWLINE = "\n\r"
_SD_COMMENTS = "#;"


class _SystemdScanner:
    """A transcription of systemd 252's parse_env_file_internal() state machine that also
    records spans. One method per state, named as in src/basic/env-file.c."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = _Lines(text)
        self.state = "pre_key"
        self.statements: list[_Statement] = []
        self.notes: list[tuple[int, str]] = []
        self._reset_entry()

    def _reset_entry(self) -> None:
        self.key: list[str] = []
        self.key_ws: int | None = None  # systemd's last_key_whitespace
        self.key_start = 0
        self.value: list[str] = []
        self.value_ws: int | None = None  # systemd's last_value_whitespace
        self.eq_end = 0
        self.span_start: int | None = None
        self.span_end: int | None = None
        self.closed_quote = False
        self.after_quote = False
        self.continued = False
        self.comment_like = False
        self.expansion_like = False

    def run(self) -> _Parsed:
        for i, ch in enumerate(self.text):
            getattr(self, "_" + self.state)(i, ch)
        clean = self.state == "pre_key" and (not self.text or self.text.endswith("\n"))
        if self.state == "key":
            self.notes.append((self.lines.of(self.key_start), "no `=` in this line; systemd ignores it"))
        if self.state in ("pre_value", "value", "value_escape", "sq", "dq", "dq_escape"):
            unterminated = self.state in ("sq", "dq", "dq_escape")
            self._push(len(self.text), trim=self.state == "value", unterminated=unterminated)
        return _Parsed(tuple(self.statements), tuple(self.notes), clean)

    def _mark(self, i: int) -> None:
        """Character i belongs to the value: the replaceable span reaches past it."""
        if self.span_start is None:
            self.span_start = i
        self.span_end = i + 1

    def _note_unquoted(self, i: int, ch: str) -> None:
        """Remember characters a shell user would read as a comment or an expansion."""
        if ch in _SD_COMMENTS and i > 0 and self.text[i - 1] in " \t":
            self.comment_like = True
        self._note_expansion(i, ch)

    def _note_expansion(self, i: int, ch: str) -> None:
        after = self.text[i + 1 : i + 2]
        if ch == "`" or ch == "$" and (after in ("{", "(", "_") or after.isalpha()):
            self.expansion_like = True

    def _pre_key(self, i: int, ch: str) -> None:
        if ch in _SD_COMMENTS:
            self.state = "comment"
        elif ch not in _SD_WHITESPACE:
            self.state = "key"
            self._reset_entry()
            self.key, self.key_start = [ch], i

    def _key(self, i: int, ch: str) -> None:
        if ch in _SD_NEWLINE:
            self.notes.append((self.lines.of(self.key_start), "no `=` in this line; systemd ignores it"))
            self.state = "pre_key"
        elif ch == "=":
            self.state, self.eq_end = "pre_value", i + 1
        else:
            if ch not in _SD_WHITESPACE:
                self.key_ws = None
            elif self.key_ws is None:
                self.key_ws = len(self.key)
            self.key.append(ch)

    def _pre_value(self, i: int, ch: str) -> None:
        if ch in _SD_NEWLINE:
            self._push(i, trim=False)
            return
        if ch not in _SD_WHITESPACE and self.closed_quote:
            self.after_quote = True
        if ch == "'":
            self.state = "sq"
            self._mark(i)
        elif ch == '"':
            self.state = "dq"
            self._mark(i)
        elif ch == "\\":
            self.state = "value_escape"
            self.span_start = i if self.span_start is None else self.span_start
        elif ch not in _SD_WHITESPACE:
            self.state = "value"
            self.value.append(ch)
            self._mark(i)
            self._note_unquoted(i, ch)

    def _value(self, i: int, ch: str) -> None:
        if ch in _SD_NEWLINE:
            self._push(i, trim=True)
        elif ch == "\\":
            # systemd forgets the trailing blanks it was about to trim: they are value now
            self.state, self.value_ws = "value_escape", None
            self.span_end = i
        else:
            if ch not in _SD_WHITESPACE:
                self.value_ws = None
                self._mark(i)
                self._note_unquoted(i, ch)
            elif self.value_ws is None:
                self.value_ws = len(self.value)
            self.value.append(ch)

    def _value_escape(self, i: int, ch: str) -> None:
        self.state = "value"
        if ch in _SD_NEWLINE:
            self.continued = True  # an escaped line end is eaten: the value goes on
        else:
            self.value.append(ch)
            self._mark(i)

    def _sq(self, i: int, ch: str) -> None:
        self._mark(i)
        if ch == "'":
            self.state, self.closed_quote = "pre_value", True
        else:
            self.value.append(ch)

    def _dq(self, i: int, ch: str) -> None:
        self._mark(i)
        if ch == '"':
            self.state, self.closed_quote = "pre_value", True
        elif ch == "\\":
            self.state = "dq_escape"
        else:
            self.value.append(ch)
            self._note_expansion(i, ch)

    def _dq_escape(self, i: int, ch: str) -> None:
        self._mark(i)
        self.state = "dq"
        if ch in _DQ_ESCAPED:
            self.value.append(ch)
        elif ch != "\n":
            self.value.extend(("\\", ch))

    def _comment(self, i: int, ch: str) -> None:
        if ch == "\\":
            self.state = "comment_escape"
        elif ch in _SD_NEWLINE:
            self.state = "pre_key"

    def _comment_escape(self, i: int, ch: str) -> None:
        # systemd 252 stays in the comment whatever the escaped character is (254 changed this).
        self.state = "comment"
        if ch == "\n":
            line = self.lines.of(i)
            self.notes.append((line, f"comment ends with `\\`: systemd 252 reads line {line + 1} as comment too"))

    def _push(self, end: int, *, trim: bool, unterminated: bool = False) -> None:
        """An entry is complete at a line end (or the end of the file)."""
        key = "".join(self.key[: self.key_ws] if self.key_ws is not None else self.key)
        value = self.value[: self.value_ws] if trim and self.value_ws is not None else self.value
        start = self.span_start if self.span_start is not None else self.eq_end
        assign = _Assign(
            key=key,
            value="".join(value),
            line=self.lines.of(self.key_start),
            value_start=start,
            value_end=self.span_end if self.span_end is not None else start,
            word_start=self.key_start,
            unterminated=unterminated,
            after_quote=self.after_quote,
            continued=self.continued,
            comment_like=self.comment_like,
            expansion_like=self.expansion_like,
        )
        line_end = end + 1 if end < len(self.text) else end
        if self.text[end : end + 2] == "\r\n":
            line_end = end + 2
        span = (_line_start(self.text, self.key_start), line_end)
        kind: Literal["assign", "invalid"] = "assign" if _NAME.fullmatch(key) else "invalid"
        self.statements.append(_Statement(assign.line, kind, (assign,), (), span))
        self.state = "pre_key"


def _scan_systemd(text: str) -> _Parsed:
    return _SystemdScanner(text).run()


def _systemd_values(text: str) -> dict[str, str]:
    """What a unit started with EnvironmentFile=FILE gets from it."""
    if "\0" in text:
        raise _error(
            _Lines(text).of(text.index("\0")),
            "NUL byte in the file",
            "systemd refuses the whole file and the unit fails to start",
        )
    values: dict[str, str] = {}
    for statement in _scan_systemd(text).statements:
        (assign,) = statement.assigns
        if _bad_unicode(assign.key) or _bad_unicode(assign.value or ""):
            raise _error(
                assign.line,
                f"{assign.key}: invalid UTF-8",
                "systemd refuses the whole file and the unit fails to start",
            )
        if statement.kind == "assign":
            values[assign.key] = assign.value or ""
    return values


# ---------------------------------------------------------------- bash `set -a; . FILE`

_BLANKS = " \t"
_WORD_END = " \t\n;"
_BOM = "\ufeff"
_OPERATORS = "&|<>()"
_SPECIAL_PARAMS = "@*#?$!-0123456789"
_ASSIGN_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")


class _ShellSyntax(Exception):
    """bash would report a syntax error here and stop reading the file."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset, self.reason = offset, reason


@dataclass(frozen=True)
class _Word:
    start: int
    end: int
    raw: str
    key: str | None  # set when the word is an assignment NAME=... / NAME+=...
    appends: bool
    value_start: int
    value_end: int  # a CR right before the LF counts as line ending, which edits preserve
    value: str | None  # None when a shell is needed to evaluate it
    problem: str
    brace: bool  # unquoted { (brace expansion applies to export arguments)
    operator: bool  # unquoted & | < > ( ): not a simple command


class _ShellScanner:
    """Reads the subset of bash that env files use: blank lines, comments, and lines of
    ``[export] NAME=word ...`` separated by ``;``. Anything else is recorded as an ``other``
    statement (edit() leaves it alone; read_values() refuses to guess what it does).

    Like bash, it parses a whole line before running it: a syntax error anywhere in a line
    means nothing on that line runs and bash stops reading the file."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        self.lines = _Lines(text)
        self.pos = 0

    def run(self) -> _Parsed:
        statements: list[_Statement] = []
        terminated = True
        while self.pos < self.n:
            line_start = self.pos
            try:
                found, terminated = self._logical_line()
            except _ShellSyntax as err:
                line = self.lines.of(min(err.offset, self.n))
                return _Parsed(tuple(statements), (), False, line, err.reason)
            if len(found) == 1:  # alone on its line(s): removing it removes the line
                found[0] = replace(found[0], line_span=(line_start, self.pos))
            statements.extend(found)
        return _Parsed(tuple(statements), (), terminated)

    # -- lines and commands

    def _peek(self) -> str | None:
        return self.text[self.pos] if self.pos < self.n else None

    def _skip_blanks(self) -> None:
        while self.pos < self.n:
            if self.text[self.pos] in _BLANKS:
                self.pos += 1
            elif self.text.startswith("\\\n", self.pos):
                self.pos += 2  # a line continuation is no character at all
            else:
                return

    def _logical_line(self) -> tuple[list[_Statement], bool]:
        """Commands up to an unquoted newline; returns them and whether a newline ended them."""
        found: list[_Statement] = []
        while True:
            self._skip_blanks()
            ch = self._peek()
            if ch is None:
                return found, False
            if ch == "\n":
                self.pos += 1
                return found, True
            if ch == "#":
                end = self.text.find("\n", self.pos)
                self.pos = self.n if end < 0 else end
            elif ch == ";":
                raise _ShellSyntax(self.pos, "syntax error near `;` (a `;` comment line?)")
            else:
                found.append(self._command())
                self._skip_blanks()
                if self._peek() == ";":
                    self.pos += 1

    def _command(self) -> _Statement:
        words: list[_Word] = []
        while True:
            self._skip_blanks()
            ch = self._peek()
            if ch is None or ch in "\n;#":
                break
            words.append(self._word())
        return _classify(words, self.lines.of(words[0].start))

    # -- words

    def _word(self) -> _Word:
        start = self.pos
        match = _ASSIGN_WORD.match(self.text, start)
        if match:
            self.pos = match.end()
        reader = _WordReader(self, tilde_ok=match is not None)
        reader.read()
        value_start = match.end() if match else start
        value_end = self.pos
        at_eol = self.pos == self.n or self.text[self.pos] == "\n"
        if at_eol and value_end > value_start and self.text[value_end - 1] == "\r":
            value_end -= 1
        return _Word(
            start=start,
            end=self.pos,
            raw=self.text[start : self.pos],
            key=match.group(1) if match else None,
            appends=bool(match and match.group(2)),
            value_start=value_start,
            value_end=value_end,
            value=None if reader.problem else "".join(reader.out),
            problem=reader.problem,
            brace=reader.brace,
            operator=reader.operator,
        )


class _WordReader:
    """Evaluates one word (after ``NAME=``, for assignments) the way bash would, or notes the
    first construct that needs a real shell (expansions, ANSI-C quotes, ~)."""

    def __init__(self, scanner: _ShellScanner, *, tilde_ok: bool) -> None:
        self.s = scanner
        self.text = scanner.text
        self.out: list[str] = []
        self.problem = ""
        self.brace = False
        self.operator = False
        self.tilde_ok = tilde_ok  # assignment values: ~ expands at the start and after ':'

    def _needs_shell(self, what: str) -> None:
        self.problem = self.problem or what

    def read(self) -> None:
        s = self.s
        at_start = True
        while s.pos < s.n:
            ch = self.text[s.pos]
            if ch in _WORD_END:
                return
            if ch == "~" and self.tilde_ok and (at_start or self.text[s.pos - 1] == ":"):
                self._needs_shell("`~` (tilde expansion)")
            at_start = False
            handler = self._HANDLERS.get(ch)
            if handler is not None:
                handler(self)
                continue
            if ch in _OPERATORS:
                self.operator = True
            elif ch == "{":
                self.brace = True
            self.out.append(ch)
            s.pos += 1

    def _backslash(self) -> None:
        s = self.s
        nxt = self.text[s.pos + 1] if s.pos + 1 < s.n else None
        if nxt is None:
            self.out.append("\\")  # bash keeps a backslash at the very end of the file
            s.pos += 1
        elif nxt == "\n":
            s.pos += 2  # line continuation
        else:
            self.out.append(nxt)
            s.pos += 2

    def _single_quote(self) -> None:
        s = self.s
        end = self.text.find("'", s.pos + 1)
        if end < 0:
            raise _ShellSyntax(s.pos, "unexpected end of file looking for the closing `'`")
        self.out.append(self.text[s.pos + 1 : end])
        s.pos = end + 1

    def _double_quote(self) -> None:
        s = self.s
        open_at = s.pos
        s.pos += 1
        while s.pos < s.n:
            ch = self.text[s.pos]
            if ch == '"':
                s.pos += 1
                return
            if ch == "\\" and s.pos + 1 < s.n:
                nxt = self.text[s.pos + 1]
                if nxt in _DQ_ESCAPED:
                    self.out.append(nxt)
                elif nxt != "\n":
                    self.out.append("\\" + nxt)
                s.pos += 2
            elif ch == "$":
                self._dollar(in_dq=True)
            elif ch == "`":
                self._backtick()
            else:
                self.out.append(ch)
                s.pos += 1
        raise _ShellSyntax(open_at, 'unexpected end of file looking for the closing `"`')

    def _dollar(self, *, in_dq: bool = False) -> None:
        s, text = self.s, self.text
        j = s.pos + 1
        while text.startswith("\\\n", j):
            j += 2  # bash drops line continuations before it looks at what follows `$`
        nxt = text[j] if j < s.n else ""
        if nxt in ("(", "{", "["):
            what = {"(": "`$(...)` (command substitution)", "{": "`${...}` (expansion)", "[": "`$[...]` (arithmetic)"}[
                nxt
            ]
            self._needs_shell(what)
            s.pos = _skip_group(text, j, nxt, {"(": ")", "{": "}", "[": "]"}[nxt])
        elif nxt and (nxt.isalpha() and nxt.isascii() or nxt == "_"):
            self._needs_shell("`$NAME` (variable expansion)")
            match = _NAME.match(text, j)
            s.pos = match.end() if match else j + 1
        elif nxt and nxt in _SPECIAL_PARAMS:
            self._needs_shell(f"`${nxt}` (special parameter)")
            s.pos = j + 1
        elif nxt == "'" and not in_dq:
            self._needs_shell("`$'...'` (ANSI-C quoting)")
            s.pos = _skip_ansi_c(text, j + 1)
        elif nxt == '"' and not in_dq:
            self._needs_shell('`$"..."` (translated string)')
            s.pos = j
        else:
            self.out.append("$")  # a lone $ is literal
            s.pos += 1

    def _backtick(self) -> None:
        self._needs_shell("backticks (command substitution)")
        s = self.s
        i = s.pos + 1
        while i < s.n and self.text[i] != "`":
            i += 2 if self.text[i] == "\\" else 1
        if i >= s.n:
            raise _ShellSyntax(s.pos, "unexpected end of file looking for the closing backtick")
        s.pos = i + 1

    _HANDLERS: dict[str, Callable[[_WordReader], None]] = {
        "\\": _backslash,
        "'": _single_quote,
        '"': _double_quote,
        "$": _dollar,
        "`": _backtick,
    }


def _skip_group(text: str, i: int, opener: str, closer: str) -> int:
    """Offset just past the bracket matching text[i], skipping quotes and escapes. Only used to
    step over expansions orch will not evaluate, so approximate nesting is enough."""
    depth, open_at = 0, i
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "'":
            end = text.find("'", i + 1)
            i = len(text) if end < 0 else end + 1
            continue
        if ch == '"':
            i = _skip_dq(text, i)
            continue
        if ch == opener:
            depth += 1
        elif ch == closer:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise _ShellSyntax(open_at, f"unexpected end of file looking for the closing `{closer}`")


def _skip_dq(text: str, i: int) -> int:
    open_at = i
    i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    raise _ShellSyntax(open_at, 'unexpected end of file looking for the closing `"`')


def _skip_ansi_c(text: str, i: int) -> int:
    open_at = i - 2
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == "'":
            return i + 1
        else:
            i += 1
    raise _ShellSyntax(open_at, "unexpected end of file looking for the closing `'`")


def _classify(words: list[_Word], line: int) -> _Statement:
    """Is this simple command a pure assignment (``[export] NAME=v ...``) or something else?"""
    spans = tuple((w.start, w.end) for w in words)
    exported = words[0].raw == "export" and len(words) > 1
    args = words[1:] if exported else words
    note = ""
    if any(w.operator for w in words):
        note = "redirections, pipes, subshells or arrays are not plain assignments"
    elif exported and not all(w.key is not None or _NAME.fullmatch(w.raw) for w in args):
        note = "`export` with options or odd names"
    elif not exported and not all(w.key is not None for w in args):
        note = _command_note(words)
    if note:
        return _Statement(line, "other", (), spans, None, note)
    assigns = tuple(_assign_of(w, line, brace_expands=exported) for w in args if w.key)
    return _Statement(line, "assign", assigns, spans, None)


def _command_note(words: list[_Word]) -> str:
    """Why a line of words that are not all assignments is no plain assignment. A BOM glued to
    the file's first word is named: invisible in most editors, it made "`K=v` is a command" read
    as nonsense of a line that looks like a plain assignment. So is the lone CR a CRLF line end
    leaves after a blank: printed raw, it sent the terminal back to the line's start."""
    command = next(w for w in words if w.key is None)
    if command.raw == "\r":
        return (
            "its CRLF line end leaves a lone \\r, which bash runs as a command ($'\\r': command not found)"
            + (", so the assignments before it set nothing" if words[0].key is not None else "")
            + " (convert the file to LF line endings)"
        )
    if words[0].key is not None:
        return "assignments before a command only apply to that command"
    shown = command.raw.replace("\r", "\\r")
    if shown.startswith(_BOM):
        return (
            "the file starts with a byte-order mark (U+FEFF, invisible in most editors): bash reads the "
            f"mark and `{shown[1:]}` as one command name, not an assignment, and sets nothing from "
            "this line (save the file without a BOM)"
        )
    return f"`{shown}` is a command"


def _assign_of(word: _Word, line: int, *, brace_expands: bool) -> _Assign:
    problem = word.problem
    if not problem and word.brace and brace_expands:
        problem = "`{...}` (brace expansion in an export argument)"
    if not problem and word.appends:
        problem = "`+=` (appends to an earlier value)"
    assert word.key is not None
    return _Assign(
        key=word.key,
        value=None if problem else word.value,
        line=line,
        value_start=word.value_start,
        value_end=word.value_end,
        word_start=word.start,
        problem=problem,
        appends=word.appends,
    )


def _scan_shell(text: str) -> _Parsed:
    return _ShellScanner(text).run()


def _shell_values(text: str) -> dict[str, str]:
    """What ``set -a; . FILE`` exports, for the subset of bash env files use."""
    parsed = _scan_shell(text)
    values: dict[str, str] = {}
    for statement in parsed.statements:
        if statement.kind == "other":
            raise _error(
                statement.line,
                f"cannot evaluate this line without a shell: {statement.note}",
                "write plain KEY=value or export KEY=value lines",
            )
        for assign in statement.assigns:
            if assign.value is None:
                raise _error(
                    assign.line,
                    f"{assign.key}: value uses {assign.problem}",
                    "orch cannot evaluate it without a shell; write the literal value",
                )
            values[assign.key] = assign.value
    return values


# ---------------------------------------------------------------- public reading


def _check_dialect(dialect: str) -> None:
    if dialect not in get_args(Dialect):
        raise EnvFileError(f"unknown env-file dialect {dialect!r}", hint="use systemd or shell")


def check_size(text: str) -> None:
    """Characters, not bytes (a character is at least a byte): the parse's cost is per character."""
    if len(text) > MAX_FILE_BYTES:
        raise EnvFileError(
            f"the file holds {len(text):,} characters, larger than {MAX_FILE_BYTES >> 10} KiB: "
            "orch reads and edits env files up to that size",
            hint="an env file is a few KiB; is this the right file?",
        )


def _scan(text: str, dialect: Dialect) -> _Parsed:
    _check_dialect(dialect)
    return _scan_systemd(text) if dialect == "systemd" else _scan_shell(text)


def _error(line: int, what: str, hint: str) -> EnvFileError:
    """The module does not know the file's name; messages lead with the line, and callers that
    know the host and path put them in front."""
    return EnvFileError(f"line {line}: {what}", line=line, hint=hint)


def read_values(text: str, dialect: Dialect) -> dict[str, str]:
    """What the process would get from this file.

    systemd: an emulation of systemd 252's EnvironmentFile= (``export`` lines and invalid names
    ignored, comments only as the first non-blank character, trimming, quotes only at the start
    of a value, no expansion, CR as line end, continuation lines, last duplicate wins); a NUL or
    invalid UTF-8 raises EnvFileError, as systemd then refuses to start the unit.

    shell: bash ``set -a; . FILE`` for plain, quoted and ``export`` assignments with trailing
    comments. Raises EnvFileError(line=...) for anything that needs a shell to evaluate
    (``$VAR``, ``$(...)``, backticks, commands). At a syntax error bash stops reading the file,
    and so does this: values before it are returned."""
    _check_dialect(dialect)
    check_size(text)
    return _systemd_values(text) if dialect == "systemd" else _shell_values(text)


# ---------------------------------------------------------------- editing


def edit(text: str, changes: Mapping[str, str | None], dialect: Dialect) -> str:
    """Return text with each KEY set to its value (or removed when the value is None).

    Edits the LAST assignment of a key the reader applies (last duplicate wins in both readers)
    and leaves earlier duplicates alone; keeps an existing line's ``export`` prefix, leading
    whitespace, trailing comment and line ending; writes the value with quote_value(); appends
    missing keys as ``KEY=v`` (systemd) or ``export KEY=v`` (shell), in the file's line-ending
    style. Removing a key removes all its assignment lines. A key whose value already reads as
    wanted is left as it is, so unchanged input gives an identical string (callers skip the
    write and the restart)."""
    _check_dialect(dialect)
    if not changes:
        return text
    check_size(text)
    parsed = _scan(text, dialect)
    wanted = _validated(changes)
    splices: list[tuple[int, int, str]] = []
    removals: list[_Assign] = []
    missing: list[str] = []
    for key, value in wanted.items():
        targets = parsed.assigns(key)
        if value is None:
            for target in targets:
                _check_editable(key, target)
            removals.extend(targets)
        elif not targets:
            missing.append(key)
        elif targets[-1].value != value:
            last = targets[-1]
            _check_editable(key, last)
            splices.append((last.value_start, last.value_end, quote_value(value)))
    splices.extend(_removal_splices(parsed, removals))
    out = _apply(text, splices)
    if missing:
        out = _append(out, [(key, wanted[key] or "") for key in missing], dialect, _eol(text))
    return out


def _validated(changes: Mapping[str, str | None]) -> dict[str, str | None]:
    for key, value in changes.items():
        validate_name(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise EnvFileError(
                f"{key}: value must be a string, got {type(value).__name__} {value!r}",
                hint="quote it in YAML, e.g. '1' or 'on'",
            )
        _check_value(value, f"{key}: value")
        entry = len(key) + 1 + len(value.encode("utf-8", errors="surrogateescape"))
        if entry > MAX_ARG_BYTES:  # e.g. an args variable a flag factor composed from the file's value
            raise EnvFileError(
                f"{key}: value of {entry - len(key) - 1:,} bytes: {ENV_ENTRY_TOO_LONG}",
                hint=ENV_ENTRY_HINT,
            )
    return dict(changes)


def _check_editable(key: str, target: _Assign) -> None:
    if target.unterminated:
        raise _error(
            target.line,
            f"{key}: the quote opened here is never closed",
            "the reader takes the rest of the file as the value; close the quote",
        )
    if target.appends:
        raise _error(
            target.line,
            f"{key}+=... appends to an earlier value",
            f"orch edits plain assignments only; write {key}=...",
        )


def _removal_splices(parsed: _Parsed, removals: list[_Assign]) -> list[tuple[int, int, str]]:
    """Whole lines for statements that lose every assignment; single words otherwise."""
    doomed = {id(a) for a in removals}
    splices: list[tuple[int, int, str]] = []
    for statement in parsed.statements:
        hit = [a for a in statement.assigns if id(a) in doomed]
        if not hit:
            continue
        if len(hit) < len(statement.assigns):
            splices.extend(_word_removal(statement, a) for a in hit)
        elif statement.line_span is not None:
            splices.append((*statement.line_span, ""))
        else:
            raise _error(
                statement.line,
                f"cannot remove {hit[0].key} from a line holding several commands",
                "put each assignment on its own line",
            )
    return splices


def _word_removal(statement: _Statement, assign: _Assign) -> tuple[int, int, str]:
    """Remove one ``NAME=value`` word and the blanks that separated it from its neighbour."""
    index = [start for start, _ in statement.words].index(assign.word_start)
    start, end = statement.words[index]
    if index > 0:
        return statement.words[index - 1][1], end, ""
    return start, statement.words[index + 1][0], ""


def _apply(text: str, splices: list[tuple[int, int, str]]) -> str:
    """The text with each (start, end, new) splice made; splices never overlap. Joined in one
    pass: rebuilding the string once per splice was quadratic in files with many edits."""
    pieces, pos = [], 0
    for start, end, new in sorted(splices):
        assert start >= pos, f"overlapping edits at {start} (previous edit ends at {pos})"
        pieces += [text[pos:start], new]
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)


def _eol(text: str) -> str:
    """The file's line-ending style, taken from its last line ending."""
    last = text.rfind("\n")
    return "\r\n" if last > 0 and text[last - 1] == "\r" else "\n"


def _append(text: str, items: list[tuple[str, str]], dialect: Dialect, eol: str) -> str:
    """Append ``KEY=v`` lines so that the reader sees each as a line of its own, without
    changing what the existing lines mean (a trailing ``\\`` would swallow a plain append).
    `eol`: the line end of the file as it came (a removal may have taken the line that told it)."""
    before = _scan(text, dialect)
    if before.stop_line is not None:
        raise _error(
            before.stop_line,
            f"bash stops reading the file here ({before.stop_reason}), so {items[0][0]} would never be set",
            "fix or delete that line",
        )
    base = text
    for _ in range(3):  # at most: end the line, end a continuation, end a swallowed comment
        if _scan(base, dialect).clean_end:
            break
        base += eol
    else:
        raise _error(
            _Lines(text).of(len(text)),
            "the file ends inside an open quote",
            "close the quote before orch appends to the file",
        )
    if _meaning(_scan(base, dialect)) != _meaning(before):
        raise _changed_end(text, before, dialect)
    prefix = "export " if dialect == "shell" else ""
    return base + "".join(f"{prefix}{key}={quote_value(value)}{eol}" for key, value in items)


def _changed_end(text: str, before: _Parsed, dialect: Dialect) -> EnvFileError:
    """Why ending the last line would change its value. In a CRLF file bash sources, a CR ending
    the last line becomes part of that value (bash keeps the \\r): the file's line ends are to
    blame, not a backslash, when an LF alone would have kept the meaning."""
    line = _Lines(text).of(len(text))
    if _meaning(_scan(text + "\n", dialect)) == _meaning(before):
        return _error(
            line,
            "CRLF line endings: bash keeps the \\r in values, so ending this last line would add a \\r "
            "to its value, and every value orch writes would reach the server with a \\r after it",
            "convert the file to LF line endings (dos2unix FILE)",
        )
    return _error(
        line,
        "the file ends with a backslash",
        "a line appended after it would change the last value; end the last line",
    )


def _meaning(parsed: _Parsed) -> list[tuple[str, str | None, Literal["assign", "other", "invalid"]]]:
    return [(a.key, a.value, s.kind) for s in parsed.statements for a in s.assigns] + [
        ("", None, s.kind) for s in parsed.statements if not s.assigns
    ]


# ---------------------------------------------------------------- lint


def lint(text: str, dialect: Dialect) -> list[str]:
    """Human warnings about lines that will not do what their author thinks, each naming its
    1-based line, in line order. Nothing here is an error: the file may work as intended."""
    check_size(text)
    parsed = _scan(text, dialect)
    found = list(parsed.notes) + _duplicate_notes(parsed)
    if dialect == "systemd":
        found += _systemd_notes(text, parsed)
    else:
        found += _shell_notes(text, parsed)
    return [f"line {line}: {message}" for line, message in sorted(found, key=lambda f: f[0])]


def _duplicate_notes(parsed: _Parsed) -> list[tuple[int, str]]:
    last: dict[str, int] = {}
    for statement in parsed.statements:
        if statement.kind == "assign":
            for assign in statement.assigns:
                last[assign.key] = assign.line
    return [
        (a.line, f"{a.key} is set again on line {last[a.key]}; the last assignment wins")
        for s in parsed.statements
        if s.kind == "assign"
        for a in s.assigns
        if last[a.key] != a.line
    ]


_EXPORT_KEY = re.compile(r"export[ \t]+([A-Za-z_][A-Za-z0-9_]*)")


def _systemd_notes(text: str, parsed: _Parsed) -> list[tuple[int, str]]:
    notes: list[tuple[int, str]] = []
    if "\0" in text:
        notes.append((_Lines(text).of(text.index("\0")), "NUL byte: systemd refuses the file"))
    plain: dict[str, int] = {}  # key -> the last line that sets it as systemd reads it
    for statement in parsed.statements:
        if statement.kind == "assign":
            plain[statement.assigns[0].key] = statement.assigns[0].line
    for statement in parsed.statements:
        (a,) = statement.assigns
        notes.extend((a.line, m) for m in _systemd_entry_notes(statement.kind, a, plain))
    return notes


def _systemd_entry_notes(kind: str, a: _Assign, plain: Mapping[str, int]) -> list[str]:
    value = a.value or ""
    if kind == "invalid":
        exported = _EXPORT_KEY.fullmatch(a.key)
        if exported:
            key = exported.group(1)
            if key in plain:  # the unit gets the plain line's value, not this one's
                return [f"systemd ignores `export` lines (this line does not set {key}; line {plain[key]} does)"]
            return [f"systemd ignores `export` lines ({key} is not set for the unit)"]
        return [f"{a.key!r} is not a valid name; systemd ignores this line"]
    notes: list[str] = []
    if _bad_unicode(a.key + value):
        notes.append(f"{a.key}: invalid UTF-8; systemd refuses the file and the unit fails")
    if a.unterminated:
        notes.append(f"{a.key}: the quote is never closed; systemd reads the rest of the file")
    if a.after_quote:
        notes.append(
            f"{a.key}: text after the closing quote joins the value ({value!r}); put comments on their own line"
        )
    elif a.comment_like:
        notes.append(f"{a.key}: systemd keeps the trailing comment as data ({value!r}); put comments on their own line")
    if a.continued:
        notes.append(f"{a.key}: the value ends with `\\` and continues on the next line")
    if a.expansion_like:
        notes.append(f"{a.key}: systemd expands nothing; the value keeps `$`/backticks literally")
    return notes


def _shell_notes(text: str, parsed: _Parsed) -> list[tuple[int, str]]:
    notes: list[tuple[int, str]] = []
    if parsed.stop_line is not None:
        notes.append(
            (
                parsed.stop_line,
                f"bash: {parsed.stop_reason}; bash stops reading the file here and applies no line from here on",
            )
        )
    crlf = text.count("\r\n")
    if crlf:
        first = _Lines(text).of(text.index("\r\n"))
        notes.append((first, f"CRLF line endings ({crlf} lines): bash keeps the \\r in values"))
    for statement in parsed.statements:
        if statement.kind == "other":
            notes.append((statement.line, f"not a plain assignment: {statement.note}"))
        for a in statement.assigns:
            if a.value is None:
                notes.append((a.line, f"{a.key}: uses {a.problem}; orch cannot predict the value"))
    return notes
