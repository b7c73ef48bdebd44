"""A flag factor's value that the role's unit cannot pass to the server as one argument is refused
at config time, at the level's line (core.argsvar.unreachable, core.config.check_against_inventory).

What reaches the server depends on who expands `$SGLANG_EXTRA_ARGS`: systemd's ExecStart `$VAR`
splits at blanks honouring quotes and reading a backslash as an escape (systemd.service, "Command
lines"; EXTRACT_RELAX|EXTRACT_UNQUOTE in replace_env_argv), while a wrapper script that sources the
file (dialect: shell) and runs `server $VAR` splits at blanks and keeps quotes as characters. The
two splitters are written out below, and the rule is checked against what they give the server.

Also here: a secret flag's masked value in `orch plan` keeps the `)'` after it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.core.argsvar import ArgsEdit, FlagSetting, unreachable
from orchestrator.core.config import check_against_inventory, read_inventory, read_matrix
from orchestrator.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
FLAG = "--cuda-graph-max-bs"
VALUES = ["64", "64,128", "0.8", "a=b", "64 128", "tab\tin", "it's", 'say "hi"', "a\\b", "a*b", "$HOME", "~/x"]


def systemd_split(text: str) -> list[str]:
    """systemd's extract_first_word with EXTRACT_UNQUOTE: blanks separate words, ' and " quote
    anywhere in a word, and a backslash takes the next character, inside quotes too."""
    words: list[str] = []
    word: str | None = None
    quote, escaped = "", False
    for c in text:
        if escaped:
            word, escaped = (word or "") + c, False
        elif c == "\\":
            word, escaped = word or "", True
        elif quote:
            quote, word = ("", word) if c == quote else (quote, (word or "") + c)
        elif c in "'\"":
            quote, word = c, word or ""
        elif c in " \t\n":
            if word is not None:
                words.append(word)
            word = None
        else:
            word = (word or "") + c
    return words if word is None else [*words, word]


def shell_split(text: str) -> list[str]:
    """An unquoted `$VAR` in sh: split at IFS blanks, quotes and backslashes kept as characters."""
    return text.split()


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize(("dialect", "split"), [("systemd", systemd_split), ("shell", shell_split)])
def test_a_value_is_refused_exactly_when_its_unit_would_not_pass_it_whole(
    dialect: str, split: Callable[[str], list[str]], value: str
) -> None:
    """The rule against what each splitter gives the server from the variable orch writes."""
    written = ArgsEdit((FlagSetting(FLAG, True, value),)).apply("--tp 8")
    arrives = split(written) == ["--tp", "8", FLAG, value]
    assert (unreachable(value, dialect) is None) == arrives, (dialect, value, written, split(written))


def test_the_facts_the_rule_rests_on() -> None:
    """systemd keeps '64 128' whole; a wrapper's $VAR gives the server `'64` and `128'`."""
    written = ArgsEdit((FlagSetting(FLAG, True, "64 128"),)).apply("")
    assert written == f"{FLAG} '64 128'"
    assert systemd_split(written) == [FLAG, "64 128"]
    assert shell_split(written) == [FLAG, "'64", "128'"]
    assert unreachable("64 128", "systemd") is None
    assert (unreachable("64 128", "shell") or ("",))[0] == "a space"
    assert (unreachable("a\\b", "systemd") or ("",))[0] == "a backslash"


MATRIX = """\
name: reach
factors:
  bs:
    kind: flag
    flag: --cuda-graph-max-bs
    env: {decode: SGLANG_EXTRA_ARGS}
    levels: LEVELS
OTHER
replicates: 1
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --seed {trial_seed}"
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""


def _files(tmp_path: Path, levels: str, *, shell: bool, other: str = "") -> tuple[Path, Path]:
    matrix = tmp_path / "m.yaml"
    factors = textwrap.indent(textwrap.dedent(other), "  ")
    matrix.write_text(MATRIX.replace("LEVELS", levels).replace("OTHER\n", factors))
    text = (REPO / "inventory/local.yaml").read_text()
    if shell:
        line = "        env_file: local/decode.env\n"
        assert line in text
        text = text.replace(line, line + "        dialect: shell\n")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(text)
    return matrix, inventory


def _check(matrix: Path, inventory: Path) -> None:
    m, inv = read_matrix(matrix), read_inventory(inventory)
    for testbed in inv.testbeds.values():
        check_against_inventory(m, testbed)


def test_a_spaced_value_for_a_wrapper_script_is_refused_at_its_level(tmp_path: Path) -> None:
    matrix, inventory = _files(tmp_path, '{default: absent, two: "64 128"}', shell=True)
    with pytest.raises(ConfigError) as caught:
        _check(matrix, inventory)
    text = str(caught.value)
    assert text.startswith(f"{matrix}:7: factors.bs.levels.two: a flag value with a space cannot reach"), text
    assert "$SGLANG_EXTRA_ARGS" in text and "dialect: shell" in text and "64,128" in text, text


def test_a_list_level_is_refused_at_its_own_line(tmp_path: Path) -> None:
    matrix, inventory = _files(tmp_path, '\n      - absent\n      - "64 128"', shell=True)
    with pytest.raises(ConfigError) as caught:
        _check(matrix, inventory)
    assert str(caught.value).startswith(f"{matrix}:9: factors.bs.levels[1]: a flag value with a space"), caught.value


def test_systemd_passes_a_spaced_value_whole_so_it_is_kept(tmp_path: Path) -> None:
    """The same matrix on the systemd dialect: ExecStart's $VAR honours the quotes orch writes."""
    _check(*_files(tmp_path, '{default: absent, two: "64 128"}', shell=False))


def test_what_a_wrapper_passes_whole_is_kept(tmp_path: Path) -> None:
    """A whole args variable with spaces between flags, and an env toggle's spaced value in a
    variable of its own, are not flag values: they reach the server as today."""
    other = """\
      whole:
        levels:
          a: {decode: {SGLANG_EXTRA_ARGS_B: "--cuda-graph-max-bs 64 --tp 8"}}
          b: {decode: {SGLANG_EXTRA_ARGS_B: ""}}
      toggle:
        env: {decode: MY_LIST}
        levels: ["64 128", "8 16"]
    """
    _check(*_files(tmp_path, '{default: absent, two: "64,128"}', shell=True, other=other))


def test_a_secret_flag_value_is_not_printed_when_refused(tmp_path: Path) -> None:
    matrix, inventory = _files(tmp_path, '{without: absent, with: "opaque value 1"}', shell=True)
    matrix.write_text(matrix.read_text().replace("flag: --cuda-graph-max-bs", "flag: --api-key"))
    with pytest.raises(ConfigError) as caught:
        _check(matrix, inventory)
    assert "levels.with: a flag value with a space" in str(caught.value)
    assert "opaque" not in str(caught.value), caught.value


def test_orch_validate_exits_2_before_any_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.cli.main import main

    matrix, inventory = _files(tmp_path, '{default: absent, two: "64 128"}', shell=True)
    assert main(["validate", str(matrix), "-i", str(inventory)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{matrix}:7:" in err and "cannot reach the server" in err, err


# ---------------------------------------------------------------- a masked secret flag value in `orch plan`
SECRET = '{without: absent, with: "SECRETVALUE"}'


@pytest.mark.parametrize("secret", ["opaque-value-1", "ab12"])  # a known value, and one too short to search for
def test_orch_plan_masks_a_secret_flag_value_and_keeps_the_closing_paren(
    secret: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch plan` printed `SGLANG_EXTRA_ARGS='args(+--api-key ••••'`: the mask took `)'` with it."""
    from orchestrator.cli.main import main

    matrix, inventory = _files(tmp_path, SECRET.replace("SECRETVALUE", secret), shell=False)
    matrix.write_text(matrix.read_text().replace("flag: --cuda-graph-max-bs", "flag: --api-key"))
    assert main(["plan", str(matrix), "-i", str(inventory)]) == 0
    out = capsys.readouterr().out
    assert "SGLANG_EXTRA_ARGS='args(+--api-key ••••)'" in out, out
    assert secret not in out


def test_a_masked_flag_value_keeps_the_text_after_it() -> None:
    """The journal and free texts: a flag value already masked is not masked again up to the next blank."""
    from orchestrator.core.redact import Redactor

    redactor = Redactor.for_names([], ["opaque-value-1"])
    assert redactor.text('"args(+--api-key opaque-value-1)", x') == '"args(+--api-key ••••)", x'
    assert redactor.text("--api-key opaque-value-1tail") == "--api-key ••••"  # a longer value: masked whole
    assert Redactor().text("--api-key hunter2)") == "--api-key ••••"  # not known: a bare value to its end
