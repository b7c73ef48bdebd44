"""`orch resume RUN_DIR` checks the SSH key files the run's inventory names before it connects, as
`orch run` does (sweep.prepare.check_key_files): a key deleted since the run started was found
only when connecting, at the role's line. And a run started with --skip-preflight keeps the check:
it asks no host. On the fakes (tests/helpers/parallel_fakes), in process."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from fakes import Reply
from helpers.inproc import run_main
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.errors import ConfigError
from orchestrator.sweep import api, session
from orchestrator.sweep.progress import QuietProgress

SSH_DECODE = "        ssh: {host: A-decode.fake, user: root}"


def _with_key(inventory: Path, key: Path) -> int:
    """decode's `ssh:` names `key`; the line it is on (counted here, not by orch)."""
    text = inventory.read_text()
    line = text.splitlines().index(SSH_DECODE) + 1
    inventory.write_text(text.replace(SSH_DECODE, SSH_DECODE[:-1] + f", key: {key}}}"))
    return line


def _no_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    def connected(*args: object, **kwargs: object) -> None:
        raise AssertionError("a host was contacted")

    monkeypatch.setattr(session, "connected", connected)


def test_a_resume_whose_key_file_is_gone_is_refused_at_its_line_before_connecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("keys", 3, extra="seed: 7\n"), ("A",))
    key = tmp_path / "id_test"
    key.write_text("a key")
    line = _with_key(i, key)
    calls: list[str] = []

    def repro(testbed: str, command: str) -> Reply | None:
        calls.append(command)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return None

    fleet.repro_hook = repro
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    assert api.run(req, lambda started: QuietProgress(), warn=lambda message: None).interrupted
    journal = (tmp_path / "reports" / "r1" / "journal.jsonl").read_bytes()
    key.unlink()
    _no_connect(monkeypatch)
    said = io.StringIO()
    code = run_main(["resume", "reports/r1"], tmp_path, {"COLUMNS": "400"}, said, said)
    output = " ".join(said.getvalue().split())
    assert code == 2, output
    assert output.startswith(
        f"error: inv.yaml:{line}: SSH key {key} not found on this machine (decode (A-decode.fake:22))"
    ), output
    assert "resuming r1" not in output, output
    assert (tmp_path / "reports" / "r1" / "journal.jsonl").read_bytes() == journal


def test_a_run_with_skip_preflight_still_refuses_a_missing_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--skip-preflight skips asking the hosts; the key is this machine's file, so it is still looked at."""
    m, i = write_files(tmp_path, fake_matrix("keys", 1), ("A",))
    line = _with_key(i, tmp_path / "id_gone")
    _no_connect(monkeypatch)
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    with pytest.raises(ConfigError) as refused:
        api.run(req, lambda started: QuietProgress(), warn=lambda message: None)
    assert refused.value.exit_code == 2
    assert refused.value.line == line and "SSH key" in str(refused.value), refused.value
    assert not (tmp_path / "reports" / "r1").exists()
