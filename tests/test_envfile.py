"""Env files: byte-preserving edits, and reading them back the way systemd and bash do.

The bash checks run the real bash (``set -a; . FILE`` under ``env -i``, in tmp_path), because
"what bash reads" is the contract; the systemd checks compare against behaviour probed on real
systemd 252 (DESIGN.md section 1), since no systemd runs here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from orchestrator.core.envfile import edit, lint, quote_value, read_values, validate_name
from orchestrator.errors import ConfigError, EnvFileError

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash not installed")
BASH_OWN = {"PWD", "SHLVL", "_", "OLDPWD"}  # what bash exports by itself under env -i


def surrogate(raw: bytes) -> str:
    """How callers decode env files: foreign bytes survive as lone surrogates."""
    return raw.decode("utf-8", "surrogateescape")


def bash_env(directory: Path, text: str) -> dict[str, str]:
    """Everything ``set -a; . FILE`` exports, as real bash sees it (run inside directory)."""
    path = directory / "probe.env"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    result = subprocess.run(
        ["env", "-i", BASH or "bash", "-c", 'set -a; . "$1"; env -0', "bash", str(path)],
        cwd=directory,
        capture_output=True,
        timeout=20,
        check=False,
    )
    pairs = [item.split(b"=", 1) for item in result.stdout.split(b"\0") if item]
    found = {surrogate(k): surrogate(v) for k, v in pairs}
    return {k: v for k, v in found.items() if k not in BASH_OWN}


def lines_of(text: str) -> list[str]:
    """Split after every LF only (never str.splitlines: it also splits at \\x85, U+2028...)."""
    return re.split(r"(?<=\n)", text)


# ---------------------------------------------------------------- corpus

SYSTEMD_CORPUS = {
    "plain": "A=1\nB=two\n",
    "comments_blank": "# header\n\n  # indented comment\n; semicolon comment\nA=1\n\n\nB=2\n",
    "crlf": '# c\r\nA=1\r\nB="x y"\r\n\r\n',
    "no_final_newline": "A=1\nB=2",
    "export_lines": "export A=1\nB=2\nexport C=3\n",
    "quoted": 'A="with space"\nB=\'single $X\'\nC="esc \\" \\\\ \\$ \\`"\n',
    "duplicates": "A=1\nB=1\nA=2\nA=3 \n",
    "trailing_spaces": "A=1   \nB = 2\t\n  C=3  \n",
    "trailing_comment": 'A=8 # tp\nB="on" # c\n',
    "continuation": "A=one\\\ntwo\nB=2\n",
    "comment_swallow": "# note \\\nA=1\nB=2\n",
    "cr_only": "A=1\rB=2\r",
    "non_utf8": surrogate(b'# caf\xe9\nA="x\xffy"\nB=2\n'),
    "odd_lines": "=novalue\nNOEQUALS\n1BAD=x\nA.B=1\n  \t\nK\t=\tv\n",
    "empty": "",
    "only_newlines": "\n\n",
    "unicode": 'A="h\u00e9llo w\u00f6rld"\nB=\u65e5\u672c\nC="a\u2028b\x85c"\n',
    "ends_with_backslash": "A=1\nB=x\\",
    "ends_in_comment_escape": "A=1\n# c \\",
    "open_quote": 'A=1\nB="never closed\nC=3\n',
}

SHELL_CORPUS = {
    "plain_export": "export A=1\nexport B=two\n",
    "mixed": '# wrapper env\nA=1\nexport B=\'x y\'\n\nexport C="q \\"z\\""  # trailing comment\n',
    "multi": "export A=1 B=2\nC=3 D=4; E=5\n",
    "crlf": "export A=1\r\nexport B=2\r\n",
    "no_final_newline": "export A=1\nexport B=2",
    "duplicates": "export A=1\nA=2\nexport A=3\n",
    "semicolon_comment": "export A=1\n; old style comment\nexport B=2\n",
    "hash_in_word": "export A=a#b B=c #d\n",
    "continuation": "export A=one\\\ntwo B=3\n",
    "multiline_quote": 'export A="line1\nline2"\nB=2\n',
    "non_utf8": surrogate(b'# caf\xe9\nexport A="x\xffy"\nB=2\n'),
    "expansion": "export PATH_X=$HOME/bin\nA=1\n",
    "command": "ulimit -n 1024\nexport A=1\n",
    "indented": "  export A=1\n\tB=2\n",
    "empty": "",
    "ends_with_backslash": "export A=x\\",
    "escaped_chars": "export A=a\\ b\\$c B='it'\\''s'\n",
    "export_names": "export A B=1\n",
    "unicode": 'export A="\u65e5\u672c \u2028"\nB=\u00e9\n',
    "dq_escapes": 'export A="a\\qb\\$c\\"d\\\\e\\`f" B=\'\\q\' C=\\q\n',
}

CORPUS = [("systemd", name, text) for name, text in SYSTEMD_CORPUS.items()] + [
    ("shell", name, text) for name, text in SHELL_CORPUS.items()
]
over_corpus = pytest.mark.parametrize(("dialect", "name", "text"), CORPUS, ids=[f"{d}-{n}" for d, n, _ in CORPUS])


def corpus_where(keep):  # type: ignore[no-untyped-def]
    """Parametrize over the corpus files a test applies to (chosen at collection, not skipped)."""
    cases = [(d, n, t) for d, n, t in CORPUS if keep(d, n, t)]
    return pytest.mark.parametrize(("dialect", "name", "text"), cases, ids=[f"{d}-{n}" for d, n, _ in cases])


def readable(text: str, dialect: str) -> dict[str, str] | None:
    try:
        return read_values(text, dialect)  # type: ignore[arg-type]
    except EnvFileError:
        return None


def as_read(value: str, dialect: str, text: str) -> str:
    """bash keeps the CR of a CRLF line in the value (edits keep CRLF; lint warns about it)."""
    return value + "\r" if dialect == "shell" and "\r\n" in text else value


# Files edit() refuses on purpose (see REFUSED); any other EnvFileError in a fuzz test is a bug.
DELIBERATE = re.compile(
    r"never closed|open quote|bash stops reading|ends with a backslash|CRLF line endings|several commands|appends"
)


def assert_deliberate(err: EnvFileError) -> None:
    assert DELIBERATE.search(str(err)), str(err)


def writable(value: str) -> bool:
    try:
        quote_value(value)
    except EnvFileError:
        return False
    return True


# ---------------------------------------------------------------- round trips


@over_corpus
def test_empty_change_returns_identical_text(dialect: str, name: str, text: str) -> None:
    assert edit(text, {}, dialect) == text  # type: ignore[arg-type]


def _settable(dialect: str, text: str) -> dict[str, str]:
    return {k: v for k, v in (readable(text, dialect) or {}).items() if writable(v)}


@corpus_where(lambda d, n, t: bool(_settable(d, t)))
def test_setting_current_values_changes_nothing(dialect: str, name: str, text: str) -> None:
    values = _settable(dialect, text)
    assert values
    assert edit(text, values, dialect) == text  # type: ignore[arg-type]


def _one_line_b(dialect: str, name: str, text: str) -> bool:
    """Files with a one-line B assignment whose quote closes (open_quote is in REFUSED)."""
    values = readable(text, dialect)
    return bool(
        values
        and "B" in values
        and "\\\n" not in text
        and "\r" not in text.replace("\r\n", "")
        and name != "open_quote"
    )


@corpus_where(_one_line_b)
def test_editing_one_key_changes_only_that_line(dialect: str, name: str, text: str) -> None:
    out = edit(text, {"B": "new value"}, dialect)  # type: ignore[arg-type]
    before, after = lines_of(text), lines_of(out)
    assert len(before) == len(after)
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    assert len(changed) == 1
    old_line, new_line = changed[0]
    assert old_line[: old_line.index("=") + 1] == new_line[: new_line.index("=") + 1]
    ending = old_line[len(old_line.rstrip("\r\n")) :]
    assert new_line[len(new_line.rstrip("\r\n")) :] == ending
    values_after = read_values(out, dialect)  # type: ignore[arg-type]
    assert values_after["B"] == as_read("new value", dialect, text)


def test_foreign_bytes_in_untouched_lines_survive_byte_for_byte() -> None:
    raw = b'# caf\xe9 \xff\nA=1\nB="x\xffy"\r\nC=3'
    out = edit(surrogate(raw), {"A": "2", "D": "4"}, "systemd")
    expected = b'# caf\xe9 \xff\nA=2\nB="x\xffy"\r\nC=3\r\nD=4\r\n'
    assert out.encode("utf-8", "surrogateescape") == expected


# ---------------------------------------------------------------- exact edits

EXACT = [
    # systemd: value spans, duplicates, export lines, comments that are data, continuations
    ("systemd", "# c\nA=1\nB=2\n", {"A": "0"}, "# c\nA=0\nB=2\n"),
    ("systemd", "A=1\r\nB=2\r\n", {"B": "x y"}, 'A=1\r\nB="x y"\r\n'),
    ("systemd", "A=1\nB=2", {"B": "3"}, "A=1\nB=3"),
    ("systemd", "  B = 2  \n", {"B": "3"}, "  B = 3  \n"),
    ("systemd", "A=1\nA=2\n", {"A": "3"}, "A=1\nA=3\n"),
    ("systemd", "export A=1\n", {"A": "0"}, "export A=1\nA=0\n"),
    ("systemd", "A=8 # tp\n", {"A": "4"}, "A=4\n"),
    ("systemd", "A='x'\n", {"A": "y z"}, 'A="y z"\n'),
    ("systemd", "A=one\\\ntwo\nB=2\n", {"A": "1"}, "A=1\nB=2\n"),
    ("systemd", "A=1\\\r\n", {"A": "2"}, "A=2\\\r\n"),
    ("systemd", "A=x\\y\nB=a\\ \n", {"A": "1", "B": "2"}, "A=1\nB=2\n"),
    ("systemd", "A=x \\", {"A": "1"}, "A=1\\"),
    ("systemd", "A=x \\\n\nB=y\t\\\nz\n", {"A": "1", "B": "2"}, "A=1\\\n\nB=2\n"),
    ("systemd", "# note \\\nA=1\n", {"A": "2"}, "# note \\\nA=1\nA=2\n"),
    ("systemd", 'A="1"\n', {"A": "1"}, 'A="1"\n'),
    ("systemd", "A=\n", {"A": "v"}, "A=v\n"),
    ("systemd", "A=1\rB=2\r", {"B": "3"}, "A=1\rB=3\r"),
    # systemd appends: line-ending style, missing final newline, swallowing tails
    ("systemd", "", {"A": "1"}, "A=1\n"),
    ("systemd", "A=1", {"B": "2"}, "A=1\nB=2\n"),
    ("systemd", "A=1\r\nC=3", {"B": "2"}, "A=1\r\nC=3\r\nB=2\r\n"),
    ("systemd", "A=1\n# c \\", {"B": "2"}, "A=1\n# c \\\n\nB=2\n"),
    ("systemd", "A=1\nB=x\\", {"C": "3"}, "A=1\nB=x\\\n\nC=3\n"),
    ("systemd", "A=1\n", {"B": "2", "C": ""}, 'A=1\nB=2\nC=""\n'),
    # systemd removals
    ("systemd", "A=1\nB=2\nA=3\n", {"A": None}, "B=2\n"),
    ("systemd", "export A=1\nA=2\n", {"A": None}, "export A=1\n"),
    ("systemd", "A=1\r\nB=2\r\n", {"A": None}, "B=2\r\n"),
    ("systemd", "B=2\n", {"A": None}, "B=2\n"),
    # shell: export prefixes, comments, CRLF, several words, expansions
    ("shell", "export A=1 # tp\n", {"A": "0"}, "export A=0 # tp\n"),
    ("shell", "  A=1\n", {"A": "x y"}, '  A="x y"\n'),
    ("shell", "export A=1\r\n", {"A": "2"}, "export A=2\r\n"),
    ("shell", "export A=1 B=2\n", {"B": "3"}, "export A=1 B=3\n"),
    ("shell", "A=$(cmd)\n", {"A": "1"}, "A=1\n"),
    ("shell", 'export A="line1\nline2"\nB=2\n', {"A": "z"}, "export A=z\nB=2\n"),
    ("shell", "export A=1\n;c\n", {"A": "2"}, "export A=2\n;c\n"),
    ("shell", "export A=1", {"B": "2"}, "export A=1\nexport B=2\n"),
    ("shell", "export A=1\nA=2\n", {"A": "$x"}, 'export A=1\nA="\\$x"\n'),
    # shell removals
    ("shell", "export A=1 B=2\n", {"B": None}, "export A=1\n"),
    ("shell", "export A=1 B=2\n", {"A": None}, "export B=2\n"),
    ("shell", "A=1 B=2\n", {"A": None}, "B=2\n"),
    ("shell", "export A=1 B=2 # c\nC=3\n", {"A": None, "B": None}, "C=3\n"),
    ("shell", "export A=1\nA=2\nexport A=3 # x\n", {"A": None}, ""),
]


@pytest.mark.parametrize(("dialect", "text", "changes", "expected"), EXACT)
def test_exact_edit(dialect: str, text: str, changes: dict[str, str | None], expected: str) -> None:
    out = edit(text, changes, dialect)  # type: ignore[arg-type]
    assert out == expected
    values = read_values(out, dialect)  # type: ignore[arg-type]
    for key, value in changes.items():
        assert values.get(key) == (None if value is None else as_read(value, dialect, text))


REFUSED = [
    ("systemd", 'A="never closed\nB=2\n', {"A": "1"}, "never closed"),
    ("systemd", 'A="never closed\nB=2\n', {"C": "1"}, "open quote"),
    ("shell", "export A=1\n;c\n", {"B": "1"}, "line 2: bash stops reading"),
    ("shell", "export A=x\\", {"B": "1"}, "ends with a backslash"),
    ("shell", "A=1\r\nB=2", {"C": "1"}, "line 2: CRLF line endings: bash keeps the \\r in values"),
    ("shell", "A=1\r\nB=x\\", {"C": "1"}, "ends with a backslash"),
    ("shell", "A+=x\n", {"A": "1"}, "appends"),
    ("shell", "A=1; B=2\n", {"A": None}, "several commands"),
]


@pytest.mark.parametrize(("dialect", "text", "changes", "message"), REFUSED)
def test_edit_refuses_what_it_cannot_do_faithfully(
    dialect: str, text: str, changes: dict[str, str | None], message: str
) -> None:
    with pytest.raises(EnvFileError, match=re.escape(message)):
        edit(text, changes, dialect)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["", "1A", "A-B", "A B", "A.B", "\u00c9T\u00c9", "A=B", "export A"])
def test_invalid_names_are_refused(key: str) -> None:
    with pytest.raises(EnvFileError, match="not a valid env var name"):
        validate_name(key)
    with pytest.raises(EnvFileError):
        edit("A=1\n", {key: "1"}, "systemd")


@pytest.mark.parametrize("key", ["A", "_", "a_1", "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"])
def test_valid_names_pass(key: str) -> None:
    validate_name(key)


BAD_VALUES = [
    "a\0b",
    "a\nb",
    "a\rb",
    "\n",
    surrogate(b"x\xff"),
    "\ud800",
    "\ufffe",
    "\ufdd0",
    "\U0001ffff",
]


@pytest.mark.parametrize("value", BAD_VALUES)
def test_values_no_reader_can_carry_are_refused(value: str) -> None:
    with pytest.raises(EnvFileError):
        quote_value(value)
    for dialect in ("systemd", "shell"):
        with pytest.raises(EnvFileError, match="K: value"):
            edit("K=1\n", {"K": value}, dialect)  # type: ignore[arg-type]


def test_non_string_values_are_refused_with_a_yaml_hint() -> None:
    with pytest.raises(EnvFileError, match="got bool True.*quote it in YAML"):
        edit("", {"K": True}, "systemd")  # type: ignore[dict-item]


def test_errors_are_config_errors_naming_the_line() -> None:
    with pytest.raises(ConfigError) as info:
        read_values("A=1\nB=$(date)\n", "shell")
    assert info.value.line == 2
    assert str(info.value).startswith("line 2: B: ")


def test_unknown_dialect_is_refused() -> None:
    with pytest.raises(EnvFileError, match="dialect"):
        edit("A=1\n", {"A": "2"}, "yaml")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("1", "1"),
        ("--tp=8,x/y:z@h%+.", "--tp=8,x/y:z@h%+."),
        ("", '""'),
        ("a b", '"a b"'),
        ('$x`y`"z"\\', '"\\$x\\`y\\`\\"z\\"\\\\"'),
        ("#", '"#"'),
        ("~", '"~"'),
        ("on;", '"on;"'),
        ("\u00e9", '"\u00e9"'),
    ],
)
def test_quote_value(value: str, quoted: str) -> None:
    assert quote_value(value) == quoted


# ---------------------------------------------------------------- systemd reading (DESIGN.md)

SYSTEMD_READS = [
    ("K=8 # tp\n", {"K": "8 # tp"}),
    ('K="on" # c\n', {"K": "on# c"}),
    ("export K=v\n", {}),
    ("; comment\nK=1\n", {"K": "1"}),
    ("K=a b\n", {"K": "a b"}),
    ("K=$X\n", {"K": "$X"}),
    ("K=~/x $(c) `c`\n", {"K": "~/x $(c) `c`"}),
    ("K=1\rL=2\r", {"K": "1", "L": "2"}),
    ("K=1\r\n", {"K": "1"}),
    ("# comment \\\nK=1\nL=2\n", {"L": "2"}),
    ("K=a\\\nb\n", {"K": "ab"}),
    ("K=a\nL=x\\", {"K": "a", "L": "x"}),
    ("K=a \\", {"K": "a "}),
    ("K=a \\\n\n", {"K": "a "}),
    ("K = v  \n", {"K": "v"}),
    ("  K\t=\tv\t\n", {"K": "v"}),
    ('K=a"b"\n', {"K": 'a"b"'}),
    ("K='a b'  x\n", {"K": "a bx"}),
    ("K=a\\ b\n", {"K": "a b"}),
    ('K="a\\qb\\$c\\"d\\\\e\\`f"\n', {"K": 'a\\qb$c"d\\e`f'}),
    ('K=\nL=""\n', {"K": "", "L": ""}),
    ("K=1\nK=2\n", {"K": "2"}),
    ("1K=1\nK.X=2\n=3\nNOEQ\nK X=4\n", {}),
    ('K="multi\nline"\n', {"K": "multi\nline"}),
    ('K="open\nL=2\n', {"K": "open\nL=2\n"}),
]


@pytest.mark.parametrize(("text", "expected"), SYSTEMD_READS)
def test_read_values_systemd(text: str, expected: dict[str, str]) -> None:
    assert read_values(text, "systemd") == expected


@pytest.mark.parametrize(
    "text",
    ["A=1\nB=x\0y\n", surrogate(b"A=1\nB=\xff\n"), surrogate(b"A=1\n\xff=1\n"), "B=\ufffe\n"],
)
def test_read_values_systemd_refuses_what_fails_the_unit(text: str) -> None:
    with pytest.raises(EnvFileError, match="systemd refuses"):
        read_values(text, "systemd")


def test_read_values_systemd_ignores_foreign_bytes_in_comments() -> None:
    assert read_values(surrogate(b"# \xff\xfe\nA=1\n"), "systemd") == {"A": "1"}


# ---------------------------------------------------------------- shell reading

SHELL_READS = [
    ('export A=1\nB=\'x y\'\nC="q\\"z" # c\n', {"A": "1", "B": "x y", "C": 'q"z'}),
    ("export A=a#b B=c #d\n", {"A": "a#b", "B": "c"}),
    ("A=1; B=2;\n", {"A": "1", "B": "2"}),
    ("A=1\n;c\nB=2\n", {"A": "1"}),
    ("A=1;;\nB=2\n", {}),
    ('export A="x\ny"\n', {"A": "x\ny"}),
    ("A=1\r\n", {"A": "1\r"}),
    ("A=x\\", {"A": "x\\"}),
    ("A=x\\\n", {"A": "x"}),
    ("A='a\\b'\n", {"A": "a\\b"}),
    ("A=*\n", {"A": "*"}),
    ("A={a,b}\n", {"A": "{a,b}"}),
    ("A=a$\n", {"A": "a$"}),
    ("export A B=1\n", {"B": "1"}),
    ('A="a\\qb\\$c\\"d\\\\e\\`f" B=\'\\q\' C=\\q\n', {"A": 'a\\qb$c"d\\e`f', "B": "\\q", "C": "q"}),
]


@pytest.mark.parametrize(("text", "expected"), SHELL_READS)
def test_read_values_shell(text: str, expected: dict[str, str]) -> None:
    assert read_values(text, "shell") == expected


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("A=$(date)\n", "command substitution"),
        ("A=`date`\n", "backticks"),
        ('A="$HOME"\n', "variable expansion"),
        ("A=${X:-1}\n", "expansion"),
        ("A=~/x\n", "tilde"),
        ("A=/bin:~/bin\n", "tilde"),
        ("export A={a,b}\n", "brace expansion"),
        ("A=$'\\n'\n", "ANSI-C"),
        ("echo hi\n", "`echo` is a command"),
        ("A=1 cmd\n", "only apply to that command"),
        ("A= 1\n", "only apply to that command"),
        ("A=1 > f\n", "redirections"),
        ("A+=1\n", "appends"),
    ],
)
def test_read_values_shell_refuses_what_needs_a_shell(text: str, what: str) -> None:
    with pytest.raises(EnvFileError, match=re.escape(what)) as info:
        read_values(text, "shell")
    assert info.value.line == 1


# ---------------------------------------------------------------- lint


def test_lint_systemd() -> None:
    text = 'A=8 # tp\nexport SGLANG_X=1\nB="on" # c\n# note \\\nC=1\nD=$HOME\nA=2\nJUNK\n'
    assert lint(text, "systemd") == [
        "line 1: A is set again on line 7; the last assignment wins",
        "line 1: A: systemd keeps the trailing comment as data ('8 # tp'); put comments on their own line",
        "line 2: systemd ignores `export` lines (SGLANG_X is not set for the unit)",
        "line 3: B: text after the closing quote joins the value ('on# c'); put comments on their own line",
        "line 4: comment ends with `\\`: systemd 252 reads line 5 as comment too",
        "line 6: D: systemd expands nothing; the value keeps `$`/backticks literally",
        "line 8: no `=` in this line; systemd ignores it",
    ]


def test_lint_shell() -> None:
    text = "export A=1\r\nB=$(date)\r\nulimit -n 1\r\n; comment\r\nC=1\r\n"
    warnings = lint(text, "shell")
    assert warnings[0] == "line 1: CRLF line endings (5 lines): bash keeps the \\r in values"
    assert warnings[1].startswith("line 2: B: uses `$(...)`")
    assert warnings[2] == "line 3: not a plain assignment: `ulimit` is a command"
    assert warnings[3].startswith("line 4: bash: syntax error near `;` (a `;` comment line?)")
    assert len(warnings) == 4


def test_lint_is_quiet_on_files_orch_writes() -> None:
    values = {"A": "1", "B": "a b # c", "C": "$x", "D": ""}
    for dialect in ("systemd", "shell"):
        assert lint(edit("# flags\n", values, dialect), dialect) == []  # type: ignore[arg-type]


# ---------------------------------------------------------------- properties

SPECIAL = list("\"'$`\\ \t#;=!*?[]{}~&|<>():,%@-\u00e9\u65e5\u2028\x85\x1b\x7f")
safe_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0\r\n").filter(
    lambda ch: not (0xFDD0 <= ord(ch) <= 0xFDEF or (ord(ch) & 0xFFFE) == 0xFFFE)
)
VALUES = st.text(st.one_of(st.sampled_from(SPECIAL), safe_chars), max_size=24)
DIALECTS = st.sampled_from(["systemd", "shell"])
READABLE_BASES = [(d, text) for d, _, text in CORPUS if readable(text, d) is not None]


@given(base=st.sampled_from(READABLE_BASES), key=st.sampled_from(["A", "B", "NEW"]), value=VALUES)
def test_edited_value_reads_back(base: tuple[str, str], key: str, value: str) -> None:
    dialect, text = base
    try:
        out = edit(text, {key: value}, dialect)  # type: ignore[arg-type]
    except EnvFileError as err:
        assert_deliberate(err)
        return
    before = read_values(text, dialect)  # type: ignore[arg-type]
    after = read_values(out, dialect)  # type: ignore[arg-type]
    assert after[key] == as_read(value, dialect, text)
    assert {k: v for k, v in after.items() if k != key} == {k: v for k, v in before.items() if k != key}
    assert edit(out, {key: value}, dialect) == out  # type: ignore[arg-type]


@given(values=st.dictionaries(st.sampled_from(["A", "B", "C", "D"]), VALUES, max_size=4))
def test_both_readers_agree_on_what_orch_writes(values: dict[str, str]) -> None:
    systemd_file = edit("", values, "systemd")
    assert read_values(systemd_file, "systemd") == values
    assert read_values(systemd_file, "shell") == values
    assert read_values(edit("", values, "shell"), "shell") == values


SYSTEMD_NOISE = st.lists(
    st.sampled_from(list("AB= \t\n\r#;\\\"'x") + ["A=", " \\", "\\\n", "\r\n", "export A="]),
    max_size=30,
).map("".join)
pure_fuzz = settings(max_examples=300)


@pure_fuzz
@given(text=SYSTEMD_NOISE, value=VALUES)
def test_systemd_edit_of_random_text_sets_only_the_key(text: str, value: str) -> None:
    try:
        out = edit(text, {"A": value}, "systemd")
    except EnvFileError as err:
        assert_deliberate(err)
        return
    before, after = read_values(text, "systemd"), read_values(out, "systemd")
    assert after["A"] == value
    before.pop("A", None)
    after.pop("A")
    assert after == before


@pure_fuzz
@given(text=SYSTEMD_NOISE)
def test_systemd_removal_of_random_text(text: str) -> None:
    try:
        out = edit(text, {"A": None}, "systemd")
    except EnvFileError as err:
        assert_deliberate(err)
        return
    before, after = read_values(text, "systemd"), read_values(out, "systemd")
    before.pop("A", None)
    assert after == before


# ---------------------------------------------------------------- real bash

AWKWARD_VALUES = [
    "",
    "0",
    "1",
    "a b",
    "  lead and trail  ",
    "tab\there",
    'quote"d',
    "single'q",
    "both'\"",
    "dollar $HOME",
    "$(touch PWNED)",
    "`touch PWNED`",
    "1; touch PWNED",
    "a && touch PWNED",
    "x | touch PWNED",
    "back\\slash",
    "trailing\\",
    "\\$not",
    "hash # not comment",
    "#start",
    ";semi",
    "semi;colon",
    "glob * ? [a]",
    "{a,b}",
    "~",
    "~/x",
    "a:~/b",
    "x=y=z",
    "h\u00e9llo w\u00f6rld",
    "\u65e5\u672c\u8a9e",
    "emoji \U0001f389",
    "\x1b[31mred",
    "ctrl\x01\x7f",
    "!bang!",
    "percent %s %%",
    "--disable-cuda-graph --tp 8",
    "'",
    '"',
    "\\",
    "$",
    "`",
    "a\u2028b",
    "\x85nel",
    "=",
    "-n",
    "${X:-1}",
    "$'\\n'",
    '"$(touch PWNED)"',
]

SYSTEMD_BASE = "# managed by hand\nV0=old\n\nV1=\"old value\"\r\nV2='x'\n# tail comment\n"
SHELL_BASE = "# wrapper\nexport V0=old # keep\nV1='old'\n\nexport V2=\"x\" V3=y\n"


@pytest.mark.process
@needs_bash
@pytest.mark.parametrize(("dialect", "base"), [("systemd", SYSTEMD_BASE), ("shell", SHELL_BASE)])
def test_real_bash_reads_exactly_the_intended_values(dialect: str, base: str, tmp_path: Path) -> None:
    assert len(AWKWARD_VALUES) >= 30
    wanted = {f"V{i}": value for i, value in enumerate(AWKWARD_VALUES)}
    out = edit(base, wanted, dialect)  # type: ignore[arg-type]
    if dialect == "systemd":
        out = out.replace("\r\n", "\n")  # bash keeps CR as data; that CRLF line is for systemd
    got = bash_env(tmp_path, out)
    assert got == wanted
    assert read_values(out, dialect) == wanted  # type: ignore[arg-type]
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.process
@needs_bash
@pytest.mark.parametrize("value", [v for v in AWKWARD_VALUES if "PWNED" in v])
@pytest.mark.parametrize("dialect", ["systemd", "shell"])
def test_injected_values_do_not_execute(value: str, dialect: str, tmp_path: Path) -> None:
    for existing in ("", "K=1\n", "export K=1 # c\n"):
        out = edit(existing, {"K": value}, dialect)  # type: ignore[arg-type]
        assert bash_env(tmp_path, out)["K"] == value
        assert not (tmp_path / "PWNED").exists()


EVALUABLE = {n: t for n, t in SHELL_CORPUS.items() if readable(t, "shell") is not None}  # others: refused on purpose


@pytest.mark.process
@needs_bash
@pytest.mark.parametrize(("name", "text"), list(EVALUABLE.items()), ids=list(EVALUABLE))
def test_shell_emulation_matches_real_bash_on_the_corpus(name: str, text: str, tmp_path: Path) -> None:
    expected = readable(text, "shell")
    assert expected is not None
    assert bash_env(tmp_path, text) == expected


@pytest.mark.process
@needs_bash
def test_real_bash_after_edits_of_the_corpus(tmp_path: Path) -> None:
    for name, text in SHELL_CORPUS.items():
        if readable(text, "shell") is None or "\r" in text:
            continue
        try:
            out = edit(text, {"A": "it's $A `x`", "NEW": "n e w"}, "shell")
        except EnvFileError:
            assert name in ("semicolon_comment", "ends_with_backslash")
            continue
        assert bash_env(tmp_path, out) == read_values(out, "shell"), name
        assert bash_env(tmp_path, out)["A"] == "it's $A `x`", name


@pytest.mark.process
@needs_bash
def test_foreign_bytes_survive_real_bash(tmp_path: Path) -> None:
    text = surrogate(b'# caf\xe9\nexport A="x\xffy"\nB=2\n')
    out = edit(text, {"B": "3"}, "shell")
    assert bash_env(tmp_path, out) == {"A": surrogate(b"x\xffy"), "B": "3"}


SHELL_NOISE = st.lists(
    st.one_of(
        st.just(""),
        st.sampled_from(["# c", "; c", "export", "  "]),
        st.builds(
            lambda prefix, key, value, tail: f"{prefix}{key}={value}{tail}",
            st.sampled_from(["", "export ", "  ", "export A=1 "]),
            st.sampled_from(["A", "B"]),
            st.text(st.sampled_from(list("ab \t#;'\"\\:=*{},")), max_size=10),
            st.sampled_from(["", " # c", ";", " ; B=z"]),
        ),
    ),
    max_size=6,
).map("\n".join)

bash_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.process
@needs_bash
@bash_settings
@given(text=SHELL_NOISE)
def test_shell_emulation_matches_real_bash_on_random_files(text: str, tmp_path: Path) -> None:
    expected = readable(text, "shell")
    assume(expected is not None)
    assert bash_env(tmp_path, text) == expected


@pytest.mark.process
@needs_bash
@bash_settings
@given(text=SHELL_NOISE, value=VALUES)
def test_real_bash_reads_edits_of_random_files(text: str, value: str, tmp_path: Path) -> None:
    assume(readable(text, "shell") is not None)
    try:
        out = edit(text, {"A": value}, "shell")
    except EnvFileError as err:
        assert_deliberate(err)
        return
    got = bash_env(tmp_path, out)
    assert got.get("A") == value
    assert got == read_values(out, "shell")
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.process
@needs_bash
@bash_settings
@given(values=st.dictionaries(st.sampled_from(["A", "B", "C"]), VALUES, max_size=3), dialect=DIALECTS)
def test_real_bash_reads_random_values(values: dict[str, str], dialect: str, tmp_path: Path) -> None:
    out = edit("# flags\n", values, dialect)  # type: ignore[arg-type]
    assert bash_env(tmp_path, out) == values


# ---------------------------------------------------------------- systemd 252's own parser
#
# No systemd runs here, but systemd 252's env-file parser does: the environment.d generator reads
# $XDG_CONFIG_HOME/environment.d/*.conf with the same parse_env_file_internal() state machine as
# EnvironmentFile= and prints what it read. Two known differences: it expands $VAR (so these
# inputs hold no `$`), and it skips a key whose value was never started (`K=`, `K=""`) where
# EnvironmentFile= sets it empty (so empty results are not compared).

ENV_D_GENERATOR = Path("/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator")
needs_generator = pytest.mark.skipif(
    not ENV_D_GENERATOR.exists(), reason="systemd's environment.d generator not installed"
)
_C_ESCAPES = {"t": "\t", "r": "\r", "n": "\n"}


def decode_generator(out: str) -> dict[str, str]:
    """The generator prints KEY=value, or KEY="..." with C escapes when quoting is needed."""
    values, i = {}, 0
    while i < len(out):
        eq = out.index("=", i)
        key, i = out[i:eq], eq + 1
        chars: list[str] = []
        if out.startswith('"', i):
            i += 1
            while out[i] != '"':
                if out[i] == "\\":
                    i += 1
                    chars.append(_C_ESCAPES.get(out[i], out[i]))
                else:
                    chars.append(out[i])
                i += 1
            i += 1
        else:
            end = out.index("\n", i)
            chars.append(out[i:end])
            i = end
        assert out[i] == "\n"
        values[key] = "".join(chars)
        i += 1
    return values


def systemd_parse(directory: Path, text: str) -> dict[str, str]:
    conf = directory / "environment.d"
    conf.mkdir(exist_ok=True)
    (conf / "50-orch.conf").write_text(text)
    result = subprocess.run(
        ["env", "-i", f"XDG_CONFIG_HOME={directory}", f"HOME={directory}", str(ENV_D_GENERATOR)],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    return {k: v for k, v in decode_generator(result.stdout).items() if k != "QT_ACCESSIBILITY"}


def assert_same_as_systemd(directory: Path, text: str) -> None:
    mine, real = read_values(text, "systemd"), systemd_parse(directory, text)
    assert set(real) <= set(mine)
    assert {k: v for k, v in real.items() if mine[k]} == {k: v for k, v in mine.items() if v}


def generator_safe(text: str) -> bool:
    return "$" not in text and "\0" not in text and text.isascii()


@pytest.mark.process
@needs_generator
def test_systemd_emulation_matches_systemd_252_parser_on_the_corpus(tmp_path: Path) -> None:
    texts = [t for t, _ in SYSTEMD_READS] + list(SYSTEMD_CORPUS.values())
    for text in filter(generator_safe, texts):
        assert_same_as_systemd(tmp_path, text)


SYSTEMD_FUZZ = st.lists(
    st.sampled_from(list("ABC=  \t\n\n#;'\"\\x`") + ["\r", "\\\n", "\r\n", "export A=", " # c\n"]),
    max_size=30,
).map("".join)
generator_settings = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.process
@needs_generator
@generator_settings
@given(text=SYSTEMD_FUZZ)
def test_systemd_emulation_matches_systemd_252_parser_on_random_files(text: str, tmp_path: Path) -> None:
    assert_same_as_systemd(tmp_path, text)


@pytest.mark.process
@needs_generator
@generator_settings
@given(
    text=SYSTEMD_FUZZ,
    value=st.text(st.sampled_from(list("ab \t#;'\"\\`=~{}*:")), min_size=1, max_size=10),
)
def test_systemd_252_parser_reads_edits_of_random_files(text: str, value: str, tmp_path: Path) -> None:
    try:
        out = edit(text, {"A": value}, "systemd")
    except EnvFileError as err:
        assert_deliberate(err)
        return
    real = systemd_parse(tmp_path, out)
    assert real["A"] == value
    assert_same_as_systemd(tmp_path, out)


@pytest.mark.parametrize("dialect", ["systemd", "shell"])
def test_a_file_over_the_size_cap_is_refused_before_it_is_parsed(dialect: str) -> None:
    """A parse holds ~170 bytes a byte of the file (an 8 MB file: 1.3 GB, 26 s): what orch reads,
    edits or lints is at most MAX_FILE_BYTES, refused with its size, never parsed."""
    from orchestrator.core.envfile import MAX_FILE_BYTES
    from orchestrator.errors import EnvFileError

    text = "A=1\n" * (MAX_FILE_BYTES // 4 + 1)
    for call in (
        lambda: read_values(text, dialect),
        lambda: edit(text, {"B": "2"}, dialect),
        lambda: lint(text, dialect),
    ):
        with pytest.raises(EnvFileError, match="larger than 256 KiB"):
            call()
    assert read_values(text[: MAX_FILE_BYTES - 4], dialect) == {"A": "1"}


@pytest.mark.parametrize("dialect", ["systemd", "shell"])
def test_an_edit_to_a_value_no_process_can_be_started_with_is_refused(dialect: str) -> None:
    """Linux starts a process with an environment entry (KEY=value) of at most 128 KiB: a longer
    one, as a flag factor may compose from the file's value and its own, makes the unit fail to
    start (E2BIG) after the edit. Refused by the edit (preflight names host and file)."""
    from orchestrator.errors import EnvFileError

    text = "ARGS=--tp 8\n"
    edit(text, {"ARGS": "x" * (120 * 1024)}, dialect)  # under the limit: fine
    with pytest.raises(EnvFileError, match="128 KiB"):
        edit(text, {"ARGS": "x" * (128 * 1024)}, dialect)
