"""stdin, stdout and stderr that are there, and never fail on a character their encoding lacks
(EDGE: the process's streams).

Why: orch prints a few typographic characters ("ok — 3 factors", "… and 4 more", masked "••••")
and the user's own text (paths, flag values). Under a locale that is not UTF-8 (LANG=en_US, which
is ISO-8859-1 on Debian, or PYTHONIOENCODING=ascii on an old terminal) Python's stdout is strict:
`orch validate` ended in a UnicodeEncodeError traceback with exit 1 before saying "ok", and stderr
(backslashreplace) printed every progress line as "ETA 0:20 \\u2014 cell". Here orch's own symbols
become their ASCII spelling ("-", "...", "*") and anything else the terminal cannot show is escaped
as stderr already does (\\u4e2d), so no output can end a command and every line stays readable.
Only the streams' error handler changes: their encoding, and so what a pipe or a file receives of
characters it can encode, stays the locale's.

A standard stream closed when orch starts (`orch run M >&-` from a script or a daemon tool): Python
makes sys.stdout None, and a sweep that had completed every trial and written its report ended
in an AttributeError traceback with exit code 1, orch's "trials failed". Such a stream gets
/dev/null on its fd, as daemons do, so the next file orch opens cannot take fd 1 either.
"""

from __future__ import annotations

import codecs
import io
import os
import sys

__all__ = ["HANDLER", "ascii_spelling", "never_fail_on_encoding", "open_closed_streams", "to_devnull"]

HANDLER = "orch-plain"

# orch's own symbols (grep the package for non-ASCII text) and their ASCII spelling
_ASCII = {
    "—": "-",
    "–": "-",
    "…": "...",
    "•": "*",
    "→": "->",
    "×": "x",
    "·": "-",
    "°": " deg",
    "≤": "<=",
    "≥": ">=",
    "±": "+/-",
}


def ascii_spelling(exc: UnicodeError) -> tuple[str, int]:
    """The codecs error handler: each character the stream cannot encode as its ASCII spelling
    when it is one of orch's symbols, else as a backslash escape (Python's own for stderr)."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start : exc.end]
    shown = "".join(_ASCII.get(c) or c.encode("ascii", "backslashreplace").decode("ascii") for c in bad)
    return shown, exc.end


codecs.register_error(HANDLER, ascii_spelling)


def never_fail_on_encoding() -> None:
    """Point sys.stdout's and sys.stderr's error handler at HANDLER (once, at orch's start) where
    it matters: an encoding other than UTF-8, or a strict UTF-8 stream (a file name's undecodable
    bytes, kept as surrogates, raised there too). A UTF-8 stream with surrogateescape (the C.UTF-8
    locale) keeps writing those bytes back as they were; a stream that is not a text file of io
    (a test's capture) is left as it is."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and _may_fail(stream):
            stream.reconfigure(errors=HANDLER)


def _may_fail(stream: io.TextIOWrapper) -> bool:
    try:
        utf8 = codecs.lookup(stream.encoding).name == "utf-8"
    except LookupError:
        return True
    return not utf8 or stream.errors == "strict"


def open_closed_streams() -> None:
    """Give a standard stream closed at start /dev/null (fd and sys.* object), before anything
    opens a file that would take its fd or prints to it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            to_devnull(fd)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, encoding="utf-8", closefd=False))  # noqa: SIM115 - the process's own


def to_devnull(fd: int) -> None:
    """Point `fd` at /dev/null, open or closed (a closed one is where os.open lands first)."""
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
