"""How a process a repro left running is named (edges.leftovers.shown): one line. The red team: a
left-behind process whose argument held a newline (`sh -c 'a\nb'`) printed its command line raw,
breaking the progress line and the report's list in two. Pure."""

from __future__ import annotations

from orchestrator.edges.leftovers import MAX_SHOWN_CHARS, shown


def test_a_command_line_with_line_breaks_is_one_line() -> None:
    said = shown(41, b"sh\0-c\0sleep 100\nsleep 200\r\n\0")
    assert said == r"pid 41 (sh -c sleep 100\nsleep 200\r\n)", said


def test_a_plain_command_line_is_as_it_was() -> None:
    assert shown(7, b"sleep\x001000\x00") == "pid 7 (sleep 1000)"
    assert len(shown(7, b"x" * 5000)) == len("pid 7 ()") + MAX_SHOWN_CHARS
