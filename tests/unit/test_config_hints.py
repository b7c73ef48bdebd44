"""What core.config's reader tells a user who wrote a share as a percentage or a list as a scalar
(the seventh mutation round's survivors): refused at its line, exit 2, with the fix spelled out."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
ADAPTIVE = "adaptive:\n  metric: corruption\n  {key}: {value}\n"


def _refused(path: Path, read: object = read_matrix) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read(path)  # type: ignore[operator]
    assert info.value.exit_code == 2 and info.value.file is not None
    return info.value


def _adaptive(tmp_path: Path, key: str, value: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text((REPO / "matrices/overlap_ablation.yaml").read_text() + ADAPTIVE.format(key=key, value=value))
    return path


@pytest.mark.parametrize(("key", "value", "share"), [("alpha", "5", "0.05"), ("power", "80", "0.8")])
def test_an_adaptive_share_written_as_a_percentage_is_told_the_share(
    tmp_path: Path, key: str, value: str, share: str
) -> None:
    path = _adaptive(tmp_path, key, value)
    err = _refused(path)
    assert err.line == len(path.read_text().splitlines())  # the adaptive section's last line: the key's
    assert err.hint == f"a share, not a percentage: write {share}", err


@pytest.mark.parametrize("value", ["1.5", "1"])
def test_an_adaptive_share_too_large_but_no_percentage_gets_no_percentage_hint(tmp_path: Path, value: str) -> None:
    """1.5 is just too large, and 1 (100% would be 1, the bound itself): neither is 'write 0.015'."""
    err = _refused(_adaptive(tmp_path, "effect", value))
    assert str(err).endswith(f"adaptive.effect: must be < 1.0, got '{value}'"), err  # no hint after it


def test_a_scalar_where_a_list_goes_is_told_the_list(tmp_path: Path) -> None:
    """`after: prefill` (one role, without brackets) is answered with `[prefill]`."""
    text = (REPO / "inventory/local.yaml").read_text()
    path = tmp_path / "inv.yaml"
    path.write_text(text.replace("        after: [prefill, decode]\n", "        after: prefill\n"))
    err = _refused(path, read_inventory)
    assert err.line == next(i for i, x in enumerate(path.read_text().splitlines(), 1) if "after: prefill" in x)
    assert err.hint == "write [prefill]", err


@pytest.mark.parametrize(
    ("drop", "hint"),
    [("", "proportion metrics: corruption"), ("    corruption:\n      kind: proportion", "proportion metrics: none")],
    ids=["one proportion", "none"],
)
def test_adaptive_on_a_metric_that_is_no_proportion_is_told_which_are(tmp_path: Path, drop: str, hint: str) -> None:
    """`adaptive: {metric: wall}` names the repro's proportion metrics to choose from, or 'none'."""
    path = _adaptive(tmp_path, "effect", "0.1")
    text = path.read_text().replace("  metric: corruption\n  effect", "  metric: wall\n  effect")
    if drop:  # corruption made a plain number metric: no proportion is left
        text = text.replace(drop, "    corruption:\n      kind: number").replace("/(?P<n>\\d+)", "")
        text = text.replace("(?P<k>\\d+)", "(?P<value>\\d+)")
        text = "".join(x for x in text.splitlines(keepends=True) if "min_n" not in x)  # a proportion's rule
    path.write_text(text)
    err = _refused(path)
    assert "'wall' is not a proportion metric of the repro" in str(err), err
    assert err.line == next(i for i, x in enumerate(text.splitlines(), 1) if x == "  metric: wall")
    assert err.hint == hint, err
