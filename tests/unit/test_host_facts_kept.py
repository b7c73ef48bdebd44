"""run.json keeps every testbed's host facts, and the first session's across a resume.

A parallel run kept one host line per role ("testbeds are copies"): testbed B on other GPUs was
nowhere. A resume that ran trials wrote its own session's facts over the first's: a run resumed on
other GPUs named only the last ones. Now run.json keeps each testbed's facts (`testbed_hosts`)
and the first session's, a later session's other values beside them (`hosts_changed`), and the
report names each fact that differed, per testbed and between sessions. Unit tier: core.hostfacts
and report.hostfacts on manifests in memory, and `orch run` / `orch resume` through the API on
the fakes, nvidia-smi answering per testbed and role."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from helpers.manifests import planned
from helpers.parallel_fakes import H100, H200, fake_matrix, fleet, run, write_files

from orchestrator.core.hostfacts import recorded_hosts
from orchestrator.core.records import HostsChanged, RunManifest
from orchestrator.report.hostfacts import host_fact_findings
from orchestrator.report.render import load_report
from orchestrator.store.manifest import load_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress

MATRIX = fake_matrix("facts", 2)


# ----------------------------------------------------------------------------- core.hostfacts
@pytest.fixture(scope="module")
def base() -> RunManifest:
    return planned()[1]


def test_the_first_session_writes_what_the_old_merge_wrote(base: RunManifest) -> None:
    """The run itself: the description, then the facts found, in that order (run.json unchanged)."""
    found = {"decode": {"server_version": "0.4.1", "gpu_model": "2 x H100"}}
    update = recorded_hosts(base, {base.testbeds[0]: found}, 0)
    old = {role: {**info, **found.get(role, {})} for role, info in base.hosts.items()}
    assert json.dumps(update["hosts"]) == json.dumps(old)
    assert update["hosts_changed"] == [] and "testbed_hosts" not in update


def test_a_resume_keeps_the_first_facts_and_records_its_own_beside(base: RunManifest) -> None:
    """Resume 1 found H200 where the run found H100 (and a CUDA version the run had not recorded:
    added, not a change; the server info of another cell: not a change); resume 2 found H200
    again: no change from the latest; resume 3 back on H100: a change from resume 1's."""
    tb = base.testbeds[0]
    first = base.model_copy(
        update=recorded_hosts(base, {tb: {"decode": {"gpu_model": "H100", "server_info": "{}"}}}, 0)
    )
    m = first
    for session, model in ((1, "H200"), (2, "H200"), (3, "H100")):
        found = {"decode": {"gpu_model": model, "cuda": "12.4", "server_info": f'{{"tp_size": {session}}}'}}
        m = m.model_copy(update=recorded_hosts(m, {tb: found}, session))  # server info: the cell's, no change
    assert m.hosts == {**first.hosts, "decode": {**first.hosts["decode"], "cuda": "12.4"}}
    assert m.hosts["decode"]["gpu_model"] == "H100" and m.hosts["decode"]["server_info"] == "{}"
    assert [(c.session, c.role, c.facts) for c in m.hosts_changed] == [
        (1, "decode", {"gpu_model": "H200"}),
        (3, "decode", {"gpu_model": "H100"}),
    ]


def test_an_older_run_json_loads_with_no_testbed_facts_and_no_changes(base: RunManifest) -> None:
    text = base.model_dump_json()
    assert "testbed_hosts" not in text and "hosts_changed" not in text  # left out when empty
    loaded = RunManifest.model_validate_json(text)
    assert loaded.testbed_hosts == {} and loaded.hosts_changed == []


def test_a_change_between_sessions_is_one_caution_per_fact_naming_both_values(base: RunManifest) -> None:
    hosts = {**base.hosts, "decode": {**base.hosts["decode"], "gpu_model": "2 x H100", "server_version": "0.4.1"}}
    change = HostsChanged(session=1, role="decode", facts={"gpu_model": "2 x H200"}, trials=3, since="T1")
    said = [f.text for f in host_fact_findings(base.model_copy(update={"hosts": hosts, "hosts_changed": [change]}))]
    assert said == [
        "Host facts changed between sessions: the decode role's GPU model was '2 x H100' as the run began, "
        "'2 x H200' in resume 1 (which ran 3 trials from T1); trials on either side of the change are not "
        "like-for-like."
    ]


def test_testbeds_differing_facts_are_one_line_each_and_where_they_run_is_no_difference(base: RunManifest) -> None:
    """Three testbeds: B's server version differs (said once, A and C grouped); their addresses and
    server info (the first cell's tp_size) differ by design and are not said."""
    beds = {
        name: {"decode": {"address": f"{name}.fake", "server_version": version, "server_info": info}}
        for name, version, info in (("A", "0.4.1", "tp 1"), ("B", "0.4.2", "tp 2"), ("C", "0.4.1", "tp 4"))
    }
    m = base.model_copy(update={"testbeds": ["A", "B", "C"], "testbed_hosts": beds})
    assert [f.text for f in host_fact_findings(m)] == [
        "Testbeds are not copies: the decode role's server version differed: '0.4.1' on A, C; '0.4.2' on B; "
        "a cell's trials pooled over them mix both."
    ]


# ----------------------------------------------------------------------------- on the fakes
def test_a_one_testbed_run_json_has_no_new_keys_and_its_hosts_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet(monkeypatch, A=H100)
    m, i = write_files(tmp_path, MATRIX, ["A"])
    assert run(tmp_path, m, i, ["A"]).status == "completed"
    text = RunDir(tmp_path / "reports" / "r1").run_json.read_text()
    assert "testbed_hosts" not in text and "hosts_changed" not in text
    decode = json.loads(text)["hosts"]["decode"]
    assert list(decode)[:6] == ["address", "transport", "env_file", "dialect", "units", "health"]
    assert decode["gpu_model"] == "2 x NVIDIA H100 80GB HBM3" and decode["server_version"] == "fake-1.0"


def test_a_parallel_run_keeps_every_testbeds_facts_and_its_report_names_the_gpus_that_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Testbed B's decode host has H200s: run.json keeps both testbeds' facts (`hosts` stays A's),
    and the report's headline names the model and the driver, one line each."""
    fleet(monkeypatch, A=H100, B=H200)
    m, i = write_files(tmp_path, MATRIX, ["A", "B"])
    outcome = run(tmp_path, m, i, ["A", "B"])
    assert outcome.status == "completed"
    manifest = load_manifest(outcome.run_dir, plan=False)
    beds = manifest.testbed_hosts
    assert beds["A"]["decode"]["gpu_model"] == "2 x NVIDIA H100 80GB HBM3"
    assert beds["B"]["decode"]["gpu_model"] == "2 x NVIDIA H200"
    assert beds["B"]["decode"]["address"] == "B-decode.fake" and manifest.hosts == beds["A"]
    said = [f.text for f in load_report(outcome.run_dir).headline]
    for line in (
        "the decode role's GPU model differed: '2 x NVIDIA H100 80GB HBM3' on A; '2 x NVIDIA H200' on B",
        "the decode role's GPU driver differed: '550.54.15' on A; '560.35.03' on B",
    ):
        assert any(line in s for s in said), "\n".join(said)
    assert not any("address" in s or "role's CUDA" in s or "prefill role's GPU" in s for s in said), said


def test_a_resume_on_other_gpus_keeps_the_first_sessions_and_the_report_names_the_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's last two trials are lost (a controller killed after two: the journal cut there),
    and the decode host gets H200s before `orch resume`: run.json still names the H100s the first
    two trials ran on, records the H200s beside them, and the page says so."""
    f = fleet(monkeypatch, A=H100)
    m, i = write_files(tmp_path, MATRIX, ["A"])
    run_dir = run(tmp_path, m, i, ["A"]).run_dir
    journal = RunDir(run_dir).journal
    lines = journal.read_text().splitlines(keepends=True)
    trials = [n for n, line in enumerate(lines) if '"type":"trial"' in line.replace(" ", "")]
    journal.write_text("".join(lines[: trials[1] + 1]))
    f.gpus["A"] = H200
    resumed = api.resume(api.ResumeRequest(run_dir), lambda started: QuietProgress(), warn=lambda message: None)
    assert resumed.status == "completed" and resumed.completed == 4
    manifest = load_manifest(run_dir, plan=False)
    assert manifest.hosts["decode"]["gpu_model"] == "2 x NVIDIA H100 80GB HBM3"
    [change] = manifest.hosts_changed
    assert (change.session, change.testbed, change.role, change.trials) == (1, "", "decode", 2)
    assert change.facts == {"gpu_model": "2 x NVIDIA H200", "gpu_driver": "560.35.03"}
    said = [f.text for f in load_report(run_dir).headline if "between sessions" in f.text]
    assert said[0].startswith(
        "Host facts changed between sessions: the decode role's GPU model was '2 x NVIDIA H100 80GB HBM3' as "
        "the run began, '2 x NVIDIA H200' in resume 1 (which ran 2 trials from 20"
    )
    assert said[1].startswith("Host facts changed between sessions: the decode role's GPU driver was '550.54.15'")
    page = html.unescape((run_dir / "index.html").read_text())
    assert all(s in page for s in said) and len(said) == 2


def test_command_lines_that_differ_only_where_each_testbed_listens_are_no_difference(base: RunManifest) -> None:
    """Two copies of the simulated deployment on one machine: their units' command lines differ in
    ports and the URLs built from them only (the eighth new-user walk: a caution per role, three
    in all, for separate deployments that differ there by design). A flag's value is a difference."""

    def command(port: int, tp: int) -> str:
        return (
            f"/usr/bin/python -m sglang.launch_server --host 0.0.0.0 --port {port} --tp {tp} "
            f"--dist-init-addr 10.0.0.{port % 7}:5000 --prefill-url http://127.0.0.1:{port + 1}/"
        )

    def beds(tp_b: int) -> dict[str, dict[str, dict[str, str]]]:
        return {
            "A": {"decode": {"exec_start": command(31800, 2)}},
            "B": {"decode": {"exec_start": command(31810, tp_b)}},
        }

    same = base.model_copy(update={"testbeds": ["A", "B"], "testbed_hosts": beds(2)})
    assert host_fact_findings(same) == []
    other = base.model_copy(update={"testbeds": ["A", "B"], "testbed_hosts": beds(4)})
    [said] = [f.text for f in host_fact_findings(other)]
    assert said.startswith("Testbeds are not copies: the decode role's ") and "--tp 4" in said, said
    report_to = {tb: {"decode": {"exec_start": f"python -m sglang --report-to {tb}"}} for tb in ("A", "B")}
    assert host_fact_findings(same.model_copy(update={"testbed_hosts": report_to}))  # 'port' inside a word
