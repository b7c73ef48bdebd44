"""A local unit's failure names the inventory host that runs it, as every other message about
that host does ("decode (local): port 31502 is held by ..."): one LocalServiceManager serves all
of a testbed's local hosts, and its errors said "local: unit sim-decode: exited with code 2", which
names no host (the fifth new-user walk: a decode given a bad flag; the report's Failures table
and the terminal showed "local:" for every role)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.core.config import read_inventory
from orchestrator.edges.connect import _local_manager
from orchestrator.edges.services.local import LocalServiceManager
from orchestrator.errors import ServiceError

LOCAL = Path(__file__).resolve().parents[2] / "inventory" / "local.yaml"


@pytest.mark.parametrize(("unit", "host"), [("sim-decode", "decode (local)"), ("sglang-router", "router (local)")])
def test_a_local_units_error_names_its_host(tmp_path: Path, unit: str, host: str) -> None:
    testbed = read_inventory(LOCAL).testbeds["local-sim"]
    manager = _local_manager(dataclasses.replace(testbed, state_dir=tmp_path))
    assert isinstance(manager, LocalServiceManager)
    with pytest.raises(ServiceError) as caught:
        manager.check_alive(unit, 0.0)  # never started: no pid file in tmp_path, no process
    assert str(caught.value) == f"{host}: unit {unit}: is not running (never started)"
    assert caught.value.host == host
