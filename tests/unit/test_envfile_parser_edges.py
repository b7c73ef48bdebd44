"""The env-file readers (core.envfile) at the edges a user sees: a removal after a leading blank
line keeps that line, the last entry of a file without a final newline loses its trailing blanks
as systemd's does, and `orch lint` warns about a comment or an expansion only where a shell user
would see one (`a b` is no comment, `$5` or a `$` at the end expands nothing).

Found by mutation testing (bench/mutants.py, round two on the parser): a line start found one
character off, an untrimmed last value and warnings on every blank-separated word or `$` each left
every test green.
"""

from __future__ import annotations

import pytest

from orchestrator.core.envfile import edit, lint, read_values
from orchestrator.errors import EnvFileError


@pytest.mark.parametrize("dialect", ["systemd", "shell"])
def test_removing_the_key_after_a_leading_blank_line_keeps_the_blank_line(dialect: str) -> None:
    assert edit("\nA=1\nB=2\n", {"A": None}, dialect) == "\nB=2\n"  # type: ignore[arg-type]


def test_the_last_value_of_a_file_without_a_final_newline_loses_its_trailing_blanks() -> None:
    assert read_values("A=x  \t", "systemd") == {"A": "x"}
    assert read_values("A=x  \t\n", "systemd") == {"A": "x"}


@pytest.mark.parametrize("text", ["A=a b\n", "A=x\tand y\n", "A=a#b\n"])
def test_blank_separated_words_are_no_comment(text: str) -> None:
    assert lint(text, "systemd") == []


@pytest.mark.parametrize("text", ["A=cost$5\n", "A=x$\n", "A=a$-b\n", 'A="$5"\n'])
def test_a_dollar_no_shell_would_expand_draws_no_warning(text: str) -> None:
    assert lint(text, "systemd") == []


@pytest.mark.parametrize("text", ["A=$HOME\n", "A=${X}\n", "A=$(date)\n", "A=$_x\n", 'A="`id`"\n'])
def test_an_expansion_a_shell_user_would_expect_is_warned_about(text: str) -> None:
    assert lint(text, "systemd") == ["line 1: A: systemd expands nothing; the value keeps `$`/backticks literally"]


def test_a_double_quote_left_open_after_a_final_backslash_is_bashs_syntax_error() -> None:
    text = 'B=1\nA="x\\'
    assert read_values(text, "shell") == {"B": "1"}  # bash applies the lines before it
    assert lint(text, "shell") == [
        'line 2: bash: unexpected end of file looking for the closing `"`;'
        " bash stops reading the file here and applies no line from here on"
    ]


def _uses(what: str) -> list[str]:
    return [f"line 1: A: uses {what}; orch cannot predict the value"]


def _stops(closer: str) -> list[str]:
    return [
        f"line 1: bash: unexpected end of file looking for the closing {closer};"
        " bash stops reading the file here and applies no line from here on"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('A=$"x"\n', _uses('`$"..."` (translated string)')),
        ("A=`a b`\nB=1\n", _uses("backticks (command substitution)")),
        ("A=$(echo \\))\nB=1\n", _uses("`$(...)` (command substitution)")),
        ("A=$(echo ')')\nB=1\n", _uses("`$(...)` (command substitution)")),
        ('A=$(echo ")")\nB=1\n', _uses("`$(...)` (command substitution)")),
        ("A=`id\nB=1\n", _stops("backtick")),
        ("A=$(echo\nB=1\n", _stops("`)`")),
        ("A=$'x\n\n", _stops("`'`")),
    ],
)
def test_what_needs_a_shell_is_named_and_an_unclosed_group_stops_bash_on_its_own_line(
    text: str, expected: list[str]
) -> None:
    """A quote or escape inside `$(...)` does not close it; an unclosed one is reported where it opens."""
    assert lint(text, "shell") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A=1\0\n", ["line 1: NUL byte: systemd refuses the file"]),
        ('B=1\nA="x\nC=2\n', ["line 2: A: the quote is never closed; systemd reads the rest of the file"]),
    ],
)
def test_lint_warns_of_a_file_systemd_refuses_or_reads_to_its_end(text: str, expected: list[str]) -> None:
    assert lint(text, "systemd") == expected


def test_lint_refuses_an_unknown_dialect_naming_the_known_ones() -> None:
    with pytest.raises(EnvFileError, match="unknown env-file dialect 'toml'") as info:
        lint("A=1\n", "toml")  # type: ignore[arg-type]
    assert info.value.hint == "use systemd or shell"
