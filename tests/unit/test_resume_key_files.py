"""`orch resume RUN_DIR` checks the SSH key files the run's inventory names before it connects, as
`orch run` does (sweep.prepare.check_key_files): a key deleted since the run started was found
only when connecting, at the role's line. And a run started with --skip-preflight keeps the check:
it asks no host. On the fakes (tests/helpers/parallel_fakes), in process."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from helpers.inproc import run_main
from helpers.parallel_fakes import fake_matrix, interrupted_sweep, write_files

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


def _interrupted_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str) -> tuple[Path, int]:
    """A 1x3 sweep Ctrl-C'd in its third trial's repro, its inventory's decode `ssh:` naming `named`
    (`key: ...`, `known_hosts: ...`, files that exist); its inventory and the line of decode's `ssh:`."""
    line: list[int] = []

    def naming(text: str) -> str:
        line.append(text.splitlines().index(SSH_DECODE) + 1)
        return text.replace(SSH_DECODE, SSH_DECODE[:-1] + f", {named}}}")

    _, _, inventory = interrupted_sweep(tmp_path, monkeypatch, "keys", edit_inventory=naming)
    return inventory, line[0]


def test_a_resume_whose_key_file_is_gone_is_refused_at_its_line_before_connecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "id_test"
    key.write_text("a key")
    _, line = _interrupted_run(tmp_path, monkeypatch, f"key: {key}")
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


@pytest.mark.parametrize("gone", ["key", "known_hosts"])
def test_a_resume_dry_run_refuses_a_missing_ssh_file_as_the_resume_will(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gone: str
) -> None:
    """The dry run says what the resume will do: it refused nothing, and the resume then exited 2."""
    files = {"key": tmp_path / "id_test", "known_hosts": tmp_path / "known_hosts"}
    for path in files.values():
        path.write_text("a file")
    _, line = _interrupted_run(tmp_path, monkeypatch, ", ".join(f"{what}: {p}" for what, p in files.items()))
    run = tmp_path / "reports" / "r1"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    files[gone].unlink()
    _no_connect(monkeypatch)
    said = {}
    for argv in (["resume", "reports/r1", "--dry-run"], ["resume", "reports/r1"]):
        out = io.StringIO()
        code = run_main(argv, tmp_path, {"COLUMNS": "400"}, out, out)
        said[len(argv)] = " ".join(out.getvalue().split())
        assert code == 2, said
    dry = said[3]
    named = {"key": "SSH key", "known_hosts": "known_hosts file"}[gone]
    assert dry.startswith(
        f"error: inv.yaml:{line}: {named} {files[gone]} not found on this machine (decode (A-decode.fake:22))"
    ), dry
    assert dry == said[2], said  # word for word what the resume says
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


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
