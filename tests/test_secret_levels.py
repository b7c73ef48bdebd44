"""Level names are printed everywhere (cell ids, report, journal, run.json, plan.json, exports):
a level named by a secret's value (a short-form factor on HF_TOKEN) or shaped like a token is
refused at its file and line, exit 2, with a hint to name the levels; and a matrix's redactor
knows the values its levels give secret variables (a repro that echoes its token is masked)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.core.config import read_matrix
from orchestrator.core.redact import REDACTED

REPO = Path(__file__).resolve().parent.parent

MATRIX = """
name: t
repro:
  command: "true"
  metrics: {x: {regex: 'x=(?P<value>\\d+)'}}
factors:
  hub: {levels: {a: {decode: {HF_HUB_AUTH: "value-a"}}, b: {decode: {HF_HUB_AUTH: "value-b"}}}}
"""


def _matrix(tmp_path: Path, name: str, extra: str = ""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(MATRIX) + extra)
    return read_matrix(path)


def test_a_matrix_redactor_knows_the_values_of_its_secret_variables(tmp_path: Path) -> None:
    extra = "  tok: {levels: {a: {decode: {API_TOKEN: opaque-value-1}}, b: {decode: {API_TOKEN: null}}}}\n"
    m = _matrix(tmp_path, "tok", extra)
    assert m.redactor.text("the repro printed opaque-value-1") == f"the repro printed {REDACTED}"
    assert m.redactor.known == frozenset({"opaque-value-1"}) and m.redactor.declared == frozenset()


# ----------------------------------------------------------------------------- secret level names
SHORT = """
  tok:
    env: {decode: HF_TOKEN}
    levels: [null, "opaque-value-1"]
"""


@pytest.mark.parametrize(
    ("extra", "line", "words"),
    [
        (SHORT, 11, "levels given as a list on a secret variable"),
        ("  tok: {env: {decode: [TP, API_KEY]}, levels: [abcdefgh, zyxwvuts]}\n", 8, "on a secret variable"),
        (
            "  tok: {levels: {opaque-value-1: {decode: {API_TOKEN: opaque-value-1}}, b: {decode: {API_TOKEN: x}}}}\n",
            8,
            "level 1 is named like a secret value",
        ),
        (
            "  hub2:\n    levels:\n      a: {decode: {HF_HUB_AUTH: v}}\n"
            "      hf_AbCdEfGhIjKlMnOpQrStUv: {decode: {HF_HUB_AUTH: w}}\n",
            9,
            "level 2 is named like a secret value",
        ),
    ],
)
def test_level_names_that_would_publish_a_secret_are_refused_at_their_line(
    tmp_path: Path, extra: str, line: int, words: str
) -> None:
    from orchestrator.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        _matrix(tmp_path, "short", extra)
    err = caught.value
    assert err.line == line and words in str(err) and str(err).startswith(f"{tmp_path / 'short.yaml'}:{line}:")
    assert "opaque-value-1" not in str(err) and "hf_AbCd" not in str(err) and "name" in (err.hint or "")


def test_short_forms_on_ordinary_or_boolean_secret_levels_still_work(tmp_path: Path) -> None:
    m = _matrix(tmp_path, "ok", "  mt: {env: {decode: MAX_TOKENS}, levels: ['1800', '4000']}\n")
    assert m.factor("mt").level_names == ("'1800'", "'4000'") or m.factor("mt").level_names == ("1800", "4000")
    m = _matrix(tmp_path, "bool", "  tok: {env: {decode: USE_TOKEN}, levels: [on, off]}\n")
    assert m.factor("tok").level_names == ("on", "off")


def test_a_short_form_secret_factor_is_exit_2_with_file_and_line(tmp_path: Path, capsys) -> None:
    from orchestrator.cli.main import main

    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(MATRIX) + SHORT)
    assert main(["validate", str(path), "-i", str(REPO / "inventory/local.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:11: factors.tok.levels[1]:" in err and "name the levels" in err
    assert "opaque-value-1" not in err and "Traceback" not in err


# ----------------------------------------------------------------------------- secret flags (kind: flag)
FLAG = "  key:\n    kind: flag\n    flag: --api-key\n    env: {decode: SGLANG_EXTRA_ARGS}\n    levels: LEVELS\n"


def test_the_value_a_level_gives_a_secret_flag_is_a_known_secret(tmp_path: Path) -> None:
    """`--api-key VALUE` sits in an args variable, not in a variable of its own: its value is a
    secret all the same (a repro or a log that prints the key alone is masked)."""
    m = _matrix(tmp_path, "flag", FLAG.replace("LEVELS", '{without: absent, with: "opaque-value-1"}'))
    assert m.redactor.text("the repro printed opaque-value-1") == f"the repro printed {REDACTED}"
    assert "opaque-value-1" in m.redactor.known


def test_a_short_form_secret_flag_factor_is_refused_at_its_line(tmp_path: Path) -> None:
    """The short form names each level by its value: the key would be a cell id in run.json,
    the journal, the plan and the report."""
    from orchestrator.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        _matrix(tmp_path, "short-flag", FLAG.replace("LEVELS", '[absent, "opaque-value-1"]'))
    assert str(caught.value).startswith(f"{tmp_path / 'short-flag.yaml'}:")
    assert "opaque-value-1" not in str(caught.value)
