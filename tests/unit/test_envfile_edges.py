"""Env-file edits (core.envfile.edit) at the edges that decide what a unit runs with: a key written
twice is set where the reader takes it from (the last line) even when an earlier line already
holds the value; a removal the reader could not follow is refused as a setting is; the largest
entry a process can start with is accepted, one byte more refused with its size.

Found by mutation testing (bench/mutants.py): comparing the FIRST duplicate with the wanted value
(the cell then ran on the last line's old value), removing an unterminated quote's assignment, an
off-by-two limit and a wrong figure in its message each left every test green.
"""

from __future__ import annotations

import re

import pytest

from orchestrator.core.bounds import MAX_ARG_BYTES
from orchestrator.core.envfile import edit, read_values
from orchestrator.errors import EnvFileError


@pytest.mark.parametrize("dialect", ["systemd", "shell"])
def test_a_key_written_twice_takes_the_wanted_value_on_its_last_line(dialect: str) -> None:
    text = "A=1\nB=x\nA=2\n"
    out = edit(text, {"A": "1"}, dialect)  # type: ignore[arg-type]
    assert read_values(out, dialect)["A"] == "1"  # type: ignore[arg-type]
    assert out == "A=1\nB=x\nA=1\n"  # the earlier duplicate left as it was
    assert edit(out, {"A": "1"}, dialect) == out  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dialect", "text", "message"),
    [
        ("systemd", 'A="never closed\nB=2\n', "line 1: A: the quote opened here is never closed"),
        ("shell", "A=1\nA+=x\n", "line 2: A+=... appends to an earlier value"),
    ],
)
def test_a_removal_the_reader_could_not_follow_is_refused(dialect: str, text: str, message: str) -> None:
    with pytest.raises(EnvFileError, match=re.escape(message)):
        edit(text, {"A": None}, dialect)  # type: ignore[arg-type]


def test_the_largest_entry_a_process_starts_with_is_written_one_byte_more_refused() -> None:
    key = "ARGS"
    largest = "x" * (MAX_ARG_BYTES - len(key) - 1)  # KEY=value, its NUL included in the kernel's limit
    assert read_values(edit("", {key: largest}, "systemd"), "systemd")[key] == largest
    with pytest.raises(EnvFileError, match=f"ARGS: value of {len(largest) + 1:,} bytes: Linux starts a process"):
        edit("", {key: largest + "x"}, "systemd")


@pytest.mark.parametrize(
    ("text", "remove", "expected"),
    [
        ("A=1 B=2 C=3 # note\n", "A", "B=2 C=3 # note\n"),
        ("A=1 B=2 C=3 # note\n", "B", "A=1 C=3 # note\n"),
        ("A=1 B=2 C=3 # note\n", "C", "A=1 B=2 # note\n"),
        ("A=1 C=3\n", "C", "A=1\n"),
    ],
)
def test_a_key_removed_from_a_line_of_several_assignments_leaves_the_others(
    text: str, remove: str, expected: str
) -> None:
    out = edit(text, {remove: None}, "shell")
    assert out == expected
    kept = {k: v for k, v in read_values(text, "shell").items() if k != remove}
    assert read_values(out, "shell") == kept


def test_a_line_appended_after_a_removal_keeps_the_files_crlf_style() -> None:
    """edit() appends "in the file's line-ending style", taken from the file as it came: a cell that
    removes the one line whose CRLF told the style (the last line has none) and appends a key wrote
    the rest in LF, `K5=b\\nK4=c\\n` (model sweep seed 396, tests/helpers/modelsweep.py)."""
    out = edit("K1=a\r\nK5=b", {"K1": None, "K4": "c"}, "systemd")
    assert out == "K5=b\r\nK4=c\r\n"
    assert read_values(out, "systemd") == {"K5": "b", "K4": "c"}
