"""Provenance a team can rely on: the controller (orch version and commit, host, user, command
line, Python and packages), per host the GPUs (or "not available"), per trial what served it
(server version and info digest, command lines, env file sha256), in run.json, the journal and
the report; older run files without these fields still load."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from fakes import Role, make_bed
from helpers.report_synth import synthetic_run

from orchestrator.core import gpuinfo
from orchestrator.core.records import RunManifest, TrialProvenance, TrialRecord
from orchestrator.core.redact import Redactor
from orchestrator.edges.provenance import (
    ServerInfo,
    TrialDescriber,
    describe_controller,
    describe_host,
    orch_commit,
    parse_exec_start,
)
from orchestrator.edges.transport.local import LocalTransport
from orchestrator.report.build import build_report
from orchestrator.report.provenance import NOT_RECORDED, ranges, scan_journal, served

H100 = (
    "NVIDIA H100 80GB HBM3, 550.54.15\n" * 8
    + "--banner--\nMon Nov 30 12:00:00 2026\n"
    + "+-----------------------------------------------------------------------------------------+\n"
    + "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |\n"
    + "|-----------------------------------------+------------------------+----------------------+\n"
)
MIXED = "NVIDIA A100-SXM4-40GB, 535.104.05\nNVIDIA A100-SXM4-40GB, 535.104.05\nNVIDIA A10, 535.104.05\n--banner--\n"
FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running.\n--banner--\nNVIDIA-SMI has failed because it couldn't communicate "
    "with the NVIDIA driver.\n"
)


# ----------------------------------------------------------------------------- GPUs
def test_gpu_facts_from_captured_nvidia_smi_output() -> None:
    assert gpuinfo.parse(H100) == gpuinfo.GpuInfo("8 x NVIDIA H100 80GB HBM3", "550.54.15", "12.4")
    mixed = gpuinfo.parse(MIXED)
    assert mixed.model == "2 x NVIDIA A100-SXM4-40GB, NVIDIA A10" and mixed.driver == "535.104.05"
    assert mixed.cuda == gpuinfo.NOT_AVAILABLE  # no banner: not guessed


@pytest.mark.parametrize("output", [FAILED, gpuinfo.NO_NVIDIA_SMI + "\n", ""])
def test_no_usable_nvidia_smi_reads_not_available(output: str) -> None:
    info = gpuinfo.parse(output)
    assert info.lines() == {"gpu_model": "not available", "gpu_driver": "not available", "cuda": "not available"}


@pytest.mark.process
def test_gpu_facts_of_this_machine_for_real() -> None:
    """The command itself, run on this machine: no GPU here (clearly "not available"); a machine
    with nvidia-smi names its GPUs."""
    result = LocalTransport().run(gpuinfo.COMMAND, timeout=30, check=False)
    info = gpuinfo.parse(result.stdout)
    if shutil.which("nvidia-smi") is None:
        assert result.ok and info == gpuinfo.GpuInfo() and gpuinfo.NO_NVIDIA_SMI in result.stdout
    else:
        assert info.model != gpuinfo.NOT_AVAILABLE or "failed" in result.stdout


# ----------------------------------------------------------------------------- ExecStart
def test_exec_start_of_several_units_from_one_systemctl_show() -> None:
    text = (
        "{ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -m sglang.launch_server --port 30000 ; "
        "ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n\n"
        "{ path=/bin/bash ; argv[]=/bin/bash -c set -a; . /etc/d.env; exec srv ; ignore_errors=no }\n"
    )
    assert parse_exec_start(text, 2) == [
        "/usr/bin/python3 -m sglang.launch_server --port 30000",
        "/bin/bash -c set -a; . /etc/d.env; exec srv",
    ]
    assert parse_exec_start("{ path=/x ; argv[]=/x --a ; }\n", 1) == ["/x --a"]


# ----------------------------------------------------------------------------- per trial
class Servers:
    """A fake server per host: what /get_server_info says, and how often each host was asked."""

    def __init__(self, bed) -> None:  # type: ignore[no-untyped-def]
        self.info = {role: {"version": "0.5.4", "role": role, "pid": 1, "flags": {"overlap": True}} for role in bed}
        self.asked: dict[str, int] = dict.fromkeys(bed, 0)
        self.old_path = set(bed)  # hosts that answer /get_server_info (others: /server_info only)
        self.by_port = {h.host.url.rsplit(":", 1)[1]: role for role, h in bed.items()}

    def client(self) -> httpx.Client:
        def handler(request: httpx.Request) -> httpx.Response:
            role = self.by_port[str(request.url.port)]
            old = request.url.path == "/get_server_info"
            if old != (role in self.old_path):
                return httpx.Response(404)
            self.asked[role] += 1
            self.info[role]["pid"] += 1  # volatile: never part of the digest
            return httpx.Response(200, json=self.info[role])

        return httpx.Client(transport=httpx.MockTransport(handler))


def test_each_trial_is_labelled_with_what_served_it_and_only_restarted_hosts_are_asked() -> None:
    bed = make_bed({"prefill": Role(env="A=1\n"), "decode": Role(env="B=1\n", units=["d1", "d2"])})
    bed.transports["decode"].script(
        ["systemctl", "show", "-p", "ExecStart", "--value", "d1", "d2"],
        stdout="{ argv[]=/srv --api-key abc123 ; }\n\n{ argv[]=/srv --two ; }\n",
    )
    servers = Servers(bed.deployment.hosts)
    servers.old_path.discard("decode")  # newer SGLang: /server_info only
    describer = TrialDescriber(bed.deployment, servers.client(), Redactor())
    env = {"prefill": b"A=1\n", "decode": b"B=2\n"}

    first = describer.describe({"prefill", "decode"}, env)
    assert set(first) == {"prefill", "decode"} and servers.asked == {"prefill": 1, "decode": 1}
    d = first["decode"]
    assert d.server_version == "0.5.4" and d.env_sha256 == hashlib.sha256(b"B=2\n").hexdigest()
    assert d.exec_start == "/srv --api-key •••• | /srv --two" and "abc123" not in d.model_dump_json()
    assert json.loads(d.server_info) == {"version": "0.5.4", "role": "decode", "flags": {"overlap": True}}

    servers.info["decode"]["flags"] = {"overlap": False}
    second = describer.describe({"decode"}, {**env, "decode": b"B=3\n"})
    assert servers.asked == {"prefill": 1, "decode": 2}  # prefill did not restart: not asked again
    assert second["prefill"] == first["prefill"].model_copy(update={"server_info": "", "exec_start": ""})
    assert second["decode"].server_info_sha != d.server_info_sha and '"overlap": false' in second["decode"].server_info
    assert second["decode"].exec_start == "" and second["decode"].exec_start_sha == d.exec_start_sha

    servers.info["decode"]["flags"] = {"overlap": True}  # back to the first cell: same digest, text not repeated
    third = describer.describe({"decode"}, env)
    assert third["decode"].server_info_sha == d.server_info_sha and third["decode"].server_info == ""
    assert bed.refused() == []


def test_a_host_described_once_per_run_has_gpu_env_and_server_facts() -> None:
    bed = make_bed({"decode": Role(env="HF_TOKEN=x\n")})
    servers = Servers(bed.deployment.hosts)
    facts = describe_host(bed.deployment.hosts["decode"], servers.client(), b"HF_TOKEN=x\n", Redactor())
    assert facts["gpu_model"] == facts["gpu_driver"] == facts["cuda"] == "not available"
    assert facts["env_sha256_before"] == hashlib.sha256(b"HF_TOKEN=x\n").hexdigest()
    assert facts["server_version"] == "0.5.4" and "fake-server --unit decode-server" in facts["exec_start"]


def test_a_hosts_gpu_facts_go_through_the_redactor_as_its_other_fields() -> None:
    """nvidia-smi's text is the host's to say: a secret-shaped value in a GPU's name is masked in
    run.json's host line as its command line and server info are (it was written as printed)."""
    bed = make_bed({"decode": Role(env="X=1\n")})
    token = "hf_" + "Q" * 20
    bed.transports["decode"].script(gpuinfo.COMMAND, stdout=H100.replace("80GB HBM3", token))
    facts = describe_host(bed.deployment.hosts["decode"], Servers(bed.deployment.hosts).client(), None, Redactor())
    assert (facts["gpu_model"], facts["gpu_driver"], facts["cuda"]) == ("8 x NVIDIA H100 ••••", "550.54.15", "12.4")
    assert token not in json.dumps(facts)


# ----------------------------------------------------------------------------- the controller
@pytest.mark.process
def test_the_controller_is_described_with_a_masked_command_line() -> None:
    c = describe_controller(Redactor(), ["orch", "run", "m.yaml", "--api-key", "abc123", "--max-tokens", "1800"])
    assert c.command == "orch run m.yaml --api-key •••• --max-tokens 1800"
    assert c.host and c.python.startswith(("CPython", "PyPy")) and "pydantic" in c.packages and c.orch_version


@pytest.mark.process
def test_the_orch_commit_of_a_checkout(tmp_path: Path) -> None:
    assert orch_commit(tmp_path) == ("", False)  # not a checkout (an installed orch)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert orch_commit(tmp_path) == (head, False)
    (tmp_path / "f").write_text("2")
    assert orch_commit(tmp_path) == (head, True)


# ----------------------------------------------------------------------------- report and old files
def _provenance(sha: str, text: str = "") -> dict[str, TrialProvenance]:
    return {"decode": TrialProvenance(server_version="1", server_info_sha=sha, server_info=text, env_sha256="e")}


def test_trials_group_by_what_served_them() -> None:
    found = served(
        [(0, _provenance("a", "A")), (1, _provenance("b", "B")), (2, _provenance("a")), (3, _provenance("a"))],
        Redactor(),
    )
    assert [(g.server_info_sha, g.trials, g.count) for g in found.groups] == [("a", "0, 2-3", 3), ("b", "1", 1)]
    assert found.texts == {"a": "A", "b": "B"}
    assert ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8" and ranges([]) == ""


def test_the_journal_scan_reads_new_lines_fast_other_spellings_whole_and_skips_old_lines(tmp_path: Path) -> None:
    _, records = synthetic_run(replicates=1, failures=False)
    new = [r.model_copy(update={"provenance": _provenance("a" if r.trial % 2 else "b", "T")}) for r in records[:3]]
    path = tmp_path / "journal.jsonl"
    lines = [r.model_dump_json() for r in new]
    lines.append(json.dumps(json.loads(new[0].model_dump_json()) | {"trial": 99}, indent=None, separators=(", ", ": ")))
    lines.append(records[3].model_dump_json().replace(',"provenance":{}', ""))  # an older record: no field
    path.write_text("\n".join(lines) + "\n")
    assert [t for t, _ in scan_journal(path)] == [r.trial for r in new] + [99]
    assert TrialRecord.model_validate_json(lines[-1]).provenance == {}
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line.encode()) + 1)
    # only the lines at these byte offsets (orch compare: the completed records', not a failed attempt's)
    assert [t for t, _ in scan_journal(path, offsets={starts[1], starts[3]})] == [new[1].trial, 99]


def test_an_older_run_json_without_the_new_fields_loads_and_says_not_recorded() -> None:
    manifest, records = synthetic_run(replicates=1, failures=False)
    old = json.loads(manifest.model_dump_json())
    del old["controller"]
    loaded = RunManifest.model_validate(old)
    assert loaded.controller is None
    report = build_report(loaded, records)
    assert report.provenance.controller == {"controller": NOT_RECORDED} and report.provenance.served == []


@pytest.mark.process
def test_the_report_shows_the_controller_and_every_trials_server() -> None:
    manifest, records = synthetic_run(replicates=1, failures=False)
    manifest = manifest.model_copy(update={"controller": describe_controller(Redactor(), ["orch", "run", "m"])})
    records = [r.model_copy(update={"provenance": _provenance(str(r.trial % 2), "HF_TOKEN=zzz")}) for r in records]
    report = build_report(manifest, records)
    pv = report.provenance
    assert pv.controller["command"] == "orch run m" and pv.controller["user"]
    assert sum(g.count for g in pv.served) == len(records) and pv.served_texts["0"] == "HF_TOKEN=••••"


def test_a_seed_the_server_draws_at_each_start_is_no_part_of_what_served_a_trial() -> None:
    """SGLang picks a random_seed at each start when none is given (ServerArgs.__post_init__): in
    the digest, every restart read as another server (a group and a stored text per trial on the
    page). A seed the user sets is in the units' command line or the env file, digested there."""
    first = ServerInfo({"version": "0.5.4", "tp_size": 2, "random_seed": 712_315_011})
    again = ServerInfo({"version": "0.5.4", "tp_size": 2, "random_seed": 45_129})
    assert first.sha == again.sha and "random_seed" not in first.text
    assert ServerInfo({"version": "0.5.4", "tp_size": 4, "random_seed": 45_129}).sha != first.sha
