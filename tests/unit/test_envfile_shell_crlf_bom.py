"""The shell reader (core.envfile, dialect shell) on files saved on Windows: CRLF line ends, CRs
inside quotes, a byte-order mark. Each expected value is what bash 5.2.15 exported from that file
with `set -a; . FILE` (printf %q of each variable, recorded by hand); `test_envfile.py`'s process
tier checks its corpus against a live bash.

bash keeps a CR as data: every value of a CRLF line ends in `\\r`, except where a comment swallows
it; a backslash before the CR escapes the CR, not the line end. A BOM glued to the first line
makes its first word a command bash cannot find (`$'\\357\\273\\277K=v': command not found`), so
that line sets nothing: orch refuses to guess, and says the BOM is why. So does a blank CRLF
line, or blanks before a CRLF end: the lone `\\r` left is a word, and bash runs it as a command
(`$'\\r': command not found`; `K=v \\r` sets no K, an assignment before a command).
"""

from __future__ import annotations

import pytest

from orchestrator.core.envfile import lint, read_values
from orchestrator.errors import EnvFileError

BASH_READS = {
    "crlf": ("K=v\r\nL=w\r\n", {"K": "v\r", "L": "w\r"}),
    "crlf, no final line end": ("K=v\r\nL=w", {"K": "v\r", "L": "w"}),
    "crlf, export": ("export K=v\r\n", {"K": "v\r"}),
    "crlf, double-quoted": ('K="v"\r\n', {"K": "v\r"}),
    "crlf, a comment takes the CR": ("K=v #c\r\n", {"K": "v"}),
    "crlf, a backslash escapes the CR": ("K=a\\\r\nL=w\r\n", {"K": "a\r", "L": "w\r"}),
    "crlf inside double quotes": ('K="a\r\nb"\r\n', {"K": "a\r\nb\r"}),
    "CR inside double quotes": ('K="a\rb"\n', {"K": "a\rb"}),
    "CR inside single quotes": ("K='a\rb'\n", {"K": "a\rb"}),
    "a lone CR is no line end": ("K=v\rL=w\n", {"K": "v\rL=w"}),
    "a CR at the end of the file": ("K=v\r", {"K": "v\r"}),
}


@pytest.mark.parametrize(("text", "bash"), BASH_READS.values(), ids=list(BASH_READS))
def test_the_shell_reader_reads_what_bash_exports(text: str, bash: dict[str, str]) -> None:
    assert read_values(text, "shell") == bash


BOM = "\ufeff"
BOM_FILES = {
    "BOM then K=v": BOM + "K=v\n",
    "BOM then export K=v": BOM + "export K=v\n",
    "BOM then a comment": BOM + "# c\nK=v\n",
    "BOM then CRLF": BOM + "K=v\r\nL=w\r\n",
}


@pytest.mark.parametrize("text", BOM_FILES.values(), ids=list(BOM_FILES))
def test_a_bom_line_is_refused_naming_the_bom(text: str) -> None:
    """The message said "`\\ufeffK=v` is a command": the BOM is invisible, so the user read
    "`K=v` is a command" of a plain assignment."""
    with pytest.raises(EnvFileError, match=r"^line 1: .*byte-order mark \(U\+FEFF") as err:
        read_values(text, "shell")
    assert "command name" in str(err.value) and "\r" not in str(err.value)
    assert any("byte-order mark" in w for w in lint(text, "shell"))


LONE_CR = {
    "a blank CRLF line": ("K=v\r\n\r\nL=w\r\n", "line 2: "),
    "a blank before the CRLF end": ("K=v \r\nL=w\r\n", "line 1: "),
}


@pytest.mark.parametrize(("text", "line"), LONE_CR.values(), ids=list(LONE_CR))
def test_a_lone_cr_bash_runs_as_a_command_is_named(text: str, line: str) -> None:
    """The message said "`\\r` is a command" with a raw CR, which a terminal shows as "`` is a
    command" (or, the blank before it, "assignments before a command only apply to that command"
    of a line with no command in sight)."""
    with pytest.raises(EnvFileError) as err:
        read_values(text, "shell")
    message = str(err.value)
    assert message.startswith(line), message
    assert "\r" not in message, "a raw CR garbles the terminal line"
    assert "CRLF line end" in message and "$'\\r': command not found" in message, message
