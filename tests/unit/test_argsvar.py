"""Flag edits inside one args variable (core.argsvar): each flag factor owns one flag, the rest of
the variable (other flags, their quoting, its blanks at the ends) stays as the file has it."""

from __future__ import annotations

import shlex

import pytest

from orchestrator.core.argsvar import PRESENT, ArgsEdit, FlagSetting, resolve, split_words
from orchestrator.errors import EnvFileError

DISABLE = FlagSetting("--disable-cuda-graph", False, PRESENT)
NO_DISABLE = FlagSetting("--disable-cuda-graph", False, None)
MAX_BS_64 = FlagSetting("--cuda-graph-max-bs", True, "64")
NO_MAX_BS = FlagSetting("--cuda-graph-max-bs", True, None)


def edit(*settings: FlagSetting) -> ArgsEdit:
    return ArgsEdit(tuple(sorted(settings)))


@pytest.mark.parametrize(
    ("before", "settings", "after"),
    [
        ("", (DISABLE,), "--disable-cuda-graph"),
        ("", (NO_DISABLE,), ""),
        ("--tp 8", (DISABLE, MAX_BS_64), "--tp 8 --cuda-graph-max-bs 64 --disable-cuda-graph"),
        # a valued flag is set where it was, its old value replaced, the flags around it kept
        ("--tp 8 --cuda-graph-max-bs 16 --mem 0.8", (MAX_BS_64,), "--tp 8 --cuda-graph-max-bs 64 --mem 0.8"),
        ("--cuda-graph-max-bs=16 --tp 8", (MAX_BS_64,), "--cuda-graph-max-bs 64 --tp 8"),
        ("--tp 8 --cuda-graph-max-bs 16 --mem 0.8", (NO_MAX_BS,), "--tp 8 --mem 0.8"),
        ("--disable-cuda-graph --tp 8", (NO_DISABLE,), "--tp 8"),
        ("--tp 8 --disable-cuda-graph", (NO_DISABLE, NO_MAX_BS), "--tp 8"),
        # other tokens keep their source text, quotes included
        ("--chat-template 'a b' --x \"c d\"", (DISABLE,), "--chat-template 'a b' --x \"c d\" --disable-cuda-graph"),
        ("--a 'q r' --disable-cuda-graph --b", (NO_DISABLE,), "--a 'q r' --b"),
        # a repeated flag: the first occurrence is set, the others removed (argparse: last wins)
        ("--cuda-graph-max-bs 8 --tp 2 --cuda-graph-max-bs 4", (MAX_BS_64,), "--cuda-graph-max-bs 64 --tp 2"),
        ("  --tp 8  ", (DISABLE,), "  --tp 8 --disable-cuda-graph  "),
        # a flag whose name is a prefix of another's is not that other flag
        ("--cuda-graph-max-bs-extra 3", (NO_MAX_BS,), "--cuda-graph-max-bs-extra 3"),
        # a valued flag written last without its value (or before another flag): set, nothing else eaten
        ("--tp 8 --cuda-graph-max-bs", (MAX_BS_64,), "--tp 8 --cuda-graph-max-bs 64"),
        ("--cuda-graph-max-bs --tp 8", (NO_MAX_BS,), "--tp 8"),
    ],
)
def test_apply(before: str, settings: tuple[FlagSetting, ...], after: str) -> None:
    assert edit(*settings).apply(before) == after


def test_the_result_parses_as_the_server_would_read_it() -> None:
    before = "--tp 8 --log-level 'debug info' --cuda-graph-max-bs 16"
    after = edit(DISABLE, MAX_BS_64).apply(before)
    assert shlex.split(after) == [
        "--tp",
        "8",
        "--log-level",
        "debug info",
        "--cuda-graph-max-bs",
        "64",
        "--disable-cuda-graph",
    ]


def test_a_value_that_needs_quoting_is_quoted() -> None:
    setting = FlagSetting("--chat-template", True, "a b")
    assert shlex.split(edit(setting).apply("--tp 8")) == ["--tp", "8", "--chat-template", "a b"]


def test_edits_compose_in_any_order() -> None:
    a, b = ArgsEdit((DISABLE,)), ArgsEdit((MAX_BS_64,))
    assert a.merged(b) == b.merged(a)
    assert a.merged(b).apply("--tp 8") == b.merged(a).apply("--tp 8")


def test_split_words_keeps_every_character() -> None:
    text = '  --a \'x y\'\t--b "c \\" d" e\\ f  '
    assert "".join(split_words(text, "t")) == text


@pytest.mark.parametrize("bad", ["--a 'open", '--a "open', '--a "x\\"', "--tp 8 x\\"])
def test_an_unsplittable_variable_is_a_typed_error(bad: str) -> None:
    with pytest.raises(EnvFileError, match="SGLANG_EXTRA_ARGS.*cannot split"):
        edit(DISABLE).apply(bad, "SGLANG_EXTRA_ARGS")


def test_resolve_applies_edits_to_the_original_value_and_keeps_plain_values() -> None:
    original = {"SGLANG_EXTRA_ARGS": "--tp 8", "OTHER": "x"}
    got = resolve({"SGLANG_EXTRA_ARGS": edit(DISABLE), "V": "1", "W": None}, original)
    assert got == {"SGLANG_EXTRA_ARGS": "--tp 8 --disable-cuda-graph", "V": "1", "W": None}


def test_resolve_leaves_an_absent_variable_absent_when_no_flag_is_set() -> None:
    assert resolve({"ARGS": edit(NO_DISABLE)}, {}) == {"ARGS": None}
    assert resolve({"ARGS": edit(DISABLE)}, {}) == {"ARGS": "--disable-cuda-graph"}
    assert resolve({"ARGS": edit(NO_DISABLE)}, {"ARGS": ""}) == {"ARGS": ""}


def test_describe() -> None:
    assert str(edit(DISABLE, NO_MAX_BS)) == "args(-(--cuda-graph-max-bs) +--disable-cuda-graph)"


def test_describe_quotes_a_value_with_a_space_as_the_file_gets_it() -> None:
    """The plan and the journal said `+--cuda-graph-max-bs 64 128` for the value '64 128' (the eighth
    new-user walk): read as the value 64 and a stray token 128."""
    spaced = FlagSetting("--cuda-graph-max-bs", True, "64 128")
    written = edit(spaced).apply("--tp 8")
    assert written == "--tp 8 --cuda-graph-max-bs '64 128'"
    assert str(edit(spaced)) == "args(+--cuda-graph-max-bs '64 128')"
    assert written.endswith(str(edit(spaced))[len("args(+") : -1])  # the plan shows what the file gets
    assert str(edit(MAX_BS_64)) == "args(+--cuda-graph-max-bs 64)"  # a plain value stays bare


def test_describe_of_a_secret_flag_value_with_a_space_is_masked_whole() -> None:
    """A secret flag's value with a space, shown bare, lost only its first word to the redactor."""
    from orchestrator.core.redact import Redactor

    shown = Redactor().text(str(edit(FlagSetting("--api-key", True, "hunter22 extra"))))
    assert "hunter22" not in shown and "extra" not in shown, shown
