"""The shell reader (core.envfile, dialect shell) on files saved on Windows: CRLF line ends, CRs
inside quotes, a byte-order mark. Each expected value is what bash 5.2.15 exported from that file
with `set -a; . FILE` (printf %q of each variable, recorded by hand); `test_envfile.py`'s process
tier checks its corpus against a live bash.

bash keeps a CR as data: every value of a CRLF line ends in `\\r`, except where a comment swallows
it; a backslash before the CR escapes the CR, not the line end. A BOM glued to the first line
makes its first word a command bash cannot find (`$'\\357\\273\\277K=v': command not found`), so
that line sets nothing: orch refuses to guess, and says the BOM is why.
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
    assert "command name" in str(err.value)
    assert any("byte-order mark" in w for w in lint(text, "shell"))
