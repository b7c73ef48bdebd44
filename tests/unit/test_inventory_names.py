"""`--testbed` with a name the inventory lacks, pinned where mutation testing found no test
(bench/README.md, "Fifth round"): the error names the inventory, suggests at most three close
spellings and lists at most eight names of a large inventory (then how many there are)."""

from __future__ import annotations

import pytest

from orchestrator.core import inventory as inv
from orchestrator.errors import ConfigError


def inventory(names: list[str]) -> inv.Inventory:
    # the module, not its Testbed class: pytest would try to collect a Test* name
    return inv.Inventory({n: inv.Testbed(n, "", {}, None) for n in names}, "inv.yaml", "")


def test_a_typo_among_many_testbeds_gets_three_suggestions_and_eight_names() -> None:
    names = [f"bed-{i}" for i in range(1, 11)]  # bed-0 is as close to bed-1 as to bed-9
    with pytest.raises(ConfigError) as err:
        inventory(names).testbed("bed-0")
    text = str(err.value)
    assert text.startswith("inv.yaml: no testbed named 'bed-0'") and err.value.exit_code == 2
    suggested = text.split("did you mean ", 1)[1].split("?", 1)[0]
    assert suggested.count("'") == 6, suggested  # three names, quoted
    assert "known: bed-1, bed-2, bed-3, bed-4, bed-5, bed-6, bed-7, bed-8, ... (10 testbeds in all)" in text


def test_no_close_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as err:
        inventory(["lab", "prod"]).testbed("staging")
    assert "known: lab, prod" in str(err.value) and "did you mean" not in str(err.value)


def test_a_name_in_the_wrong_case_is_suggested_first() -> None:
    """`-t TB1` for testbed tb1: difflib scores 'TB1' against 'tb1' at 0.33 (case counts), so the
    error only listed the known names (the eighth new-user walk)."""
    with pytest.raises(ConfigError) as err:
        inventory(["tb1", "tb2", "staging"]).testbed("TB1")
    assert "did you mean 'tb1'?" in str(err.value), str(err.value)
