"""orch on a terminal that is not UTF-8 (cli.stdio): no traceback, readable symbols.

Measured before: `PYTHONIOENCODING=latin-1 orch validate matrices/overlap_ablation.yaml` ended in
UnicodeEncodeError (exit 1) at "ok — 3 factors", and stderr printed the progress lines' dash as
"\\u2014"; the same under a real ISO-8859-1 locale (LANG=en_US on Debian).
"""

from __future__ import annotations

import io
import sys

import pytest
from helpers.shipped import REPO

from orchestrator.cli import stdio
from orchestrator.cli.main import main

MATRIX = str(REPO / "matrices" / "overlap_ablation.yaml")


def _stream(encoding: str, errors: str = "strict") -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors=errors, write_through=True)


def _written(stream: io.TextIOWrapper) -> bytes:
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue()


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_validate_on_a_terminal_that_is_not_utf8_says_ok_in_ascii(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, err = _stream(encoding), _stream(encoding, "backslashreplace")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    code = main(["validate", MATRIX])
    text = _written(out).decode(encoding)
    assert code == 0, _written(err)
    assert ": ok - 3 factors, 8 cells" in text
    assert "\\u" not in text


def test_orchs_symbols_get_their_ascii_spelling_and_the_rest_an_escape() -> None:
    text = "ok — 3 … ••••; a→b × c · 40° ≤ 1 ≥ 0 ± 2 – 中"
    got = text.encode("ascii", stdio.HANDLER).decode("ascii")
    assert got == "ok - 3 ... ****; a->b x c - 40 deg <= 1 >= 0 +/- 2 - \\u4e2d"
    # latin-1 has × · ° ±: those are written as they are
    assert "a × c · 40°".encode("latin-1", stdio.HANDLER) == "a × c · 40°".encode("latin-1")


def test_a_strict_utf8_stream_escapes_a_file_names_undecodable_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """en_US.UTF-8: stdout is strict, and a path with a latin-1 byte (a surrogate once decoded)
    raised; C.UTF-8's surrogateescape writes the byte back and is left so."""
    strict, escaping = _stream("utf-8"), _stream("utf-8", "surrogateescape")
    monkeypatch.setattr(sys, "stdout", strict)
    monkeypatch.setattr(sys, "stderr", escaping)
    stdio.never_fail_on_encoding()
    print("/tmp/m\udce9.yaml: file not found", file=sys.stdout)
    print("/tmp/m\udce9.yaml", file=sys.stderr)
    assert _written(strict) == b"/tmp/m\\udce9.yaml: file not found\n"
    assert _written(escaping) == b"/tmp/m\xe9.yaml\n"
    assert escaping.errors == "surrogateescape"


def test_a_capture_that_is_not_an_io_text_file_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    capture = io.StringIO()
    monkeypatch.setattr(sys, "stdout", capture)
    stdio.never_fail_on_encoding()
    assert sys.stdout is capture
