"""What `orch run` and `orch restore` say about a restore that did not finish, checked on the
fakes through the CLI (helpers.parallel_fakes: the whole api path, no process, no socket).

Found on a real testbed (a unit file removed mid-run: the restore wrote decode.env back, then
could not restart the unit): the run printed `NOT restored: ...` twice; the next run said
"/etc/sglang/decode.env still holds the changes of run rmunit" although the file held its original
again; `orch restore` printed its per-host "restored already; nothing to do" lines on stderr, so
with the streams read apart they came after the summary on stdout."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import REPRO_OUTPUT, Reply
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.cli import main as cli
from orchestrator.core.config import read_inventory
from orchestrator.errors import JournalError
from orchestrator.sweep.hosts import host_backup_path
from orchestrator.sweep.runner import RunResult, _raise_first_failure

ENV = {"prefill": "P=0\n", "decode": "D=0\n"}
MATRIX = fake_matrix("rm", 3, extra="order: sequential\n")


def _decode_unit_breaks_after(fleet: Fleet, trials: int, then: BaseException | None = None) -> None:
    """During the repro of trial `trials`, the decode unit's file is removed: it can no longer
    start, the next trials fail, and the restore writes decode.env back, then fails on the unit.
    `then`: raised by that repro, ending the sweep on an error instead."""
    seen: list[str] = []

    def hook(testbed: str, text: str) -> Reply:
        seen.append(text)
        if len(seen) == trials:
            for unit in fleet.managers[("A", "decode")].units.values():
                unit.fail_starts = 10_000
            if then is not None:
                raise then
        return Reply(0, REPRO_OUTPUT)

    fleet.repro_hook = hook


def _run(tmp_path: Path, run_id: str) -> list[str]:
    m, i = tmp_path / "m.yaml", tmp_path / "inv.yaml"
    return [
        "run",
        str(m),
        "-i",
        str(i),
        "--out",
        str(tmp_path / "reports"),
        "--run-id",
        run_id,
        "--skip-preflight",
        "--retries",
        "0",
    ]


def _fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """Testbed A of the fakes, with its inventory and matrix in tmp_path."""
    fleet = Fleet(ENV)
    install(monkeypatch, fleet)
    write_files(tmp_path, MATRIX, ["A"])
    return fleet


def _rmunit(tmp_path: Path, fleet: Fleet, error: BaseException | None = None) -> int:
    """`orch run --run-id rmunit` whose decode unit file is removed during its third trial; the
    hosts are left as that run left them (the repro hook removed)."""
    _decode_unit_breaks_after(fleet, 2, error)
    code = cli.main(_run(tmp_path, "rmunit"))
    fleet.repro_hook = None
    return code


def _fix(fleet: Fleet) -> None:
    for unit in fleet.managers[("A", "decode")].units.values():
        unit.fail_starts, unit.failed = 0, False


@pytest.mark.parametrize("ends_on", ["repeated-failures", "error"])
def test_a_failed_restore_is_said_once_and_the_next_run_says_what_the_host_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ends_on: str
) -> None:
    fleet = _fleet(tmp_path, monkeypatch)
    error = JournalError("journal.jsonl: No space left on device") if ends_on == "error" else None
    run_dir = tmp_path / "reports" / "rmunit"
    code = _rmunit(tmp_path, fleet, error)
    said = capsys.readouterr()
    assert code == 1, said
    line = f"NOT restored: decode; finish with: orch restore {run_dir}"
    assert (said.out + said.err).count(line) == 1, said
    assert "restore of decode failed" in said.err  # why, as it happened
    decode = fleet.transports[("A", "decode")]
    assert fleet.file("A", "decode") == ENV["decode"].encode()  # written back before the unit failed
    assert host_backup_path("/etc/orch/decode.env", "rmunit") in decode.files

    assert cli.main(_run(tmp_path, "next")) == 2
    refused = capsys.readouterr().err
    assert "still holds the changes" not in refused, refused
    assert (
        "decode (A-decode.fake:22): run rmunit never finished restoring this host: /etc/orch/decode.env holds "
        "its original again, but its units may not be as they were" in refused
    ), refused
    assert f"orch restore {run_dir}" in refused and not (tmp_path / "reports" / "next").exists()


def test_a_host_that_still_holds_the_runs_changes_is_named_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """prefill holds its original (the run never edits it), decode a cell: decode is the one named."""
    fleet = _fleet(tmp_path, monkeypatch)
    fleet.connect(read_inventory(tmp_path / "inv.yaml").testbed("A"))  # the hosts, as they are
    for role in ENV:  # as a kill -9 left them: host-side copies, and decode holding a cell
        fleet.transports[("A", role)].files[host_backup_path(f"/etc/orch/{role}.env", "k9")] = ENV[role].encode()
    fleet.transports[("A", "decode")].files["/etc/orch/decode.env"] = b"D=2\n"
    capsys.readouterr()
    assert cli.main(_run(tmp_path, "next")) == 2
    refused = capsys.readouterr().err
    assert "decode (A-decode.fake:22): /etc/orch/decode.env still holds the changes of run k9" in refused, refused
    assert "its original is in /etc/orch/decode.env.orch-backup-k9" in refused


def test_orch_restore_shows_each_host_restored_before_on_stdout_before_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = _fleet(tmp_path, monkeypatch)
    run_dir = tmp_path / "reports" / "rmunit"
    assert _rmunit(tmp_path, fleet) == 1
    _fix(fleet)  # the unit file is back
    capsys.readouterr()
    assert cli.main(["restore", str(run_dir)]) == 0
    said = capsys.readouterr()
    assert said.out.splitlines() == [
        "prefill (A-prefill.fake:22): restored already; nothing to do",
        "restored: decode (env files byte-identical, units back)",
        "restored already, nothing to do: prefill",
    ], said
    assert "nothing to do" not in said.err, said.err
    assert fleet.extra_files("A", "decode") == []


def test_a_parallel_runs_error_of_any_kind_carries_the_unrestored_hosts() -> None:
    """The one line a sweep ending on an error prints about its unrestored hosts: a note on the
    error, also when the error is a bug (the restore itself no longer prints it)."""
    bug = RuntimeError("a bug")
    with pytest.raises(RuntimeError):
        _raise_first_failure([bug], RunResult(Path("reports/r1"), not_restored=["B/decode"]))
    assert bug.__notes__ == ["NOT restored: B/decode; finish with: orch restore reports/r1"]


def test_orch_restore_of_a_run_that_put_every_host_back_says_it_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A finished run restored its hosts as it ended: `orch restore` of it printed a line per host
    and then the same again as its summary (the first new-user walk); one line says it all."""
    _fleet(tmp_path, monkeypatch)
    assert cli.main(_run(tmp_path, "done")) == 0
    capsys.readouterr()
    assert cli.main(["restore", str(tmp_path / "reports" / "done")]) == 0
    said = capsys.readouterr()
    assert said.out.splitlines() == ["restored already, nothing to do: prefill, decode"], said
    assert said.err == "", said.err
