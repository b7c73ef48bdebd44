"""What a trial's phases save, pinned where mutation testing found no test (bench/README.md,
"Fifth round"): a trial that changes one file on a host of one unit writes it in the restart's own
round trip, the first trial, which verifies every unit's live env before its repro, does not
verify the restarted ones again beside it, and a host with `verify_env: false` is never checked.
On the fakes (tests/fakes.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes import FakeServiceManager, FakeUnit, Role, flag, make_bed, make_plan, runner_for


def bed_and_plan(active: bool = True) -> tuple[Any, Any]:
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=active)])})
    return bed, make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=2)  # sequential: 0, 1, 0, 1


def test_a_one_unit_hosts_file_rides_on_its_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials 2-4 each change decode's one file and restart its one unit: three writes that go
    with the restart (restart_with_file), none in a round trip of its own."""
    bed, plan = bed_and_plan()
    with_file: list[bytes] = []
    plain = FakeServiceManager.restart_with_file

    def recorded(self: FakeServiceManager, unit: str, transport: Any, path: str, data: bytes, **kw: Any) -> float:
        with_file.append(data)
        return plain(self, unit, transport, path, data, **kw)

    monkeypatch.setattr(FakeServiceManager, "restart_with_file", recorded)
    result = runner_for(bed, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (4, 0)
    assert with_file == [b"DECODE_FLAG=1\n", b"DECODE_FLAG=0\n", b"DECODE_FLAG=1\n"]
    assert bed.file("decode") == bed.originals["decode"]


def test_the_first_trial_verifies_its_units_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """decode is stopped before the run: the first trial starts it and reads its live env before
    the repro (as it reads every unit's); each later trial reads its restarted unit's beside the
    repro: four reads for four trials, not a fifth."""
    bed, plan = bed_and_plan(active=False)
    reads: list[str] = []
    plain = FakeServiceManager.environ

    def counted(self: FakeServiceManager, unit: str) -> dict[str, str] | None:
        reads.append(unit)
        return plain(self, unit)

    monkeypatch.setattr(FakeServiceManager, "environ", counted)
    result = runner_for(bed, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (4, 0)
    assert reads == ["decode-server"] * 4


@pytest.mark.parametrize("verify_env", [True, False])
def test_a_host_with_verify_env_off_is_not_checked(tmp_path: Path, verify_env: bool) -> None:
    """A drop-in pins DECODE_FLAG=9 over the file: the live-env check fails every trial on a host
    that verifies (the first attempt's retry cannot fix it), and never reads a host that says
    `verify_env: false` (its process may not show the file's values, by design)."""
    unit = FakeUnit("decode-server", active=True, drop_in={"DECODE_FLAG": "9"})
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [unit], verify_env=verify_env)})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=1, stop_after_repeated_failures=0).execute()
    if verify_env:
        failures = [r.failure for r in result.records]
        assert result.completed == 0 and failures, failures
        assert all(f is not None and f.error == "VerificationError" and "DECODE_FLAG" in f.message for f in failures)
    else:
        assert (result.completed, result.failed) == (2, 0)
