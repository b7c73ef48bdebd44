"""`orch compare` says when two runs ran on other GPUs, drivers or CUDA versions.

orch asks each host's nvidia-smi once per run (edges.provenance.describe_host) and run.json's host
lines keep the answer (gpu_model, gpu_driver, cuda). Compare read them only inside the role's whole
host line, cut at 160 characters: a GPU model that differed was cut off, and the line said the role
"ran on" another host. Now each role on other GPUs is one line of its own, saying all three facts
of each run; a role whose GPUs only one run names is said once, with why the other does not.
Unit tier: manifests built in memory, and two runs written by `orch run` on the fakes."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from fakes import FakeServiceManager, FakeTransport
from helpers.manifests import planned
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.cli.main import main
from orchestrator.core import gpuinfo
from orchestrator.core.inventory import Host
from orchestrator.core.records import RunManifest
from orchestrator.report.unlike import unlike
from orchestrator.store.manifest import load_manifest

H100 = ("2 x NVIDIA H100 80GB HBM3", "550.54.15", "12.4")
H200 = ("2 x NVIDIA H200", "550.54.15", "12.4")  # another model only: the driver and CUDA alike
TOKEN = "hf_" + "a1B2c3D4e5F6g7H8i9J0"


def with_gpus(m: RunManifest, **roles: tuple[str, str, str] | None) -> RunManifest:
    """The manifest with these roles' GPU facts as describe_host writes them (None: none at all,
    as an older orch's run.json), beside the host description and a server's command line."""
    hosts = {}
    for role, where in m.hosts.items():
        facts = roles.get(role, H100)
        gpus = dict(zip(gpuinfo.FIELDS, facts, strict=True)) if facts is not None else {}
        hosts[role] = {**where, **gpus, "exec_start": "/usr/bin/python -m sglang.launch_server --tp 2"}
    return m.model_copy(update={"hosts": hosts})


@pytest.fixture(scope="module")
def base() -> RunManifest:
    return planned()[1]


def test_a_role_on_other_gpus_is_one_line_naming_each_runs_gpus(base: RunManifest) -> None:
    """Only the decode role's GPU model differs: one line, whole; no host line (its host is the same)."""
    found = unlike(with_gpus(base), with_gpus(base, decode=H200)).context
    assert found == (
        "the decode role ran on GPUs '2 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4' in A, "
        "on '2 x NVIDIA H200, driver 550.54.15, CUDA 12.4' in B",
    )
    newer = with_gpus(base, decode=("2 x NVIDIA H100 80GB HBM3", "560.35.03", "12.6"), prefill=H200)
    assert unlike(with_gpus(base), newer).context == (
        "the decode role ran on GPUs '2 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4' in A, "
        "on '2 x NVIDIA H100 80GB HBM3, driver 560.35.03, CUDA 12.6' in B",
        "the prefill role ran on GPUs '2 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4' in A, "
        "on '2 x NVIDIA H200, driver 550.54.15, CUDA 12.4' in B",
    )


def test_gpus_alike_or_unknown_in_both_runs_say_nothing(base: RunManifest) -> None:
    none = dict.fromkeys(base.hosts)
    nothing = (gpuinfo.NOT_AVAILABLE,) * 3
    assert unlike(with_gpus(base), with_gpus(base)).context == ()
    assert unlike(with_gpus(base, **none), with_gpus(base, **none)).context == ()
    assert unlike(with_gpus(base, decode=nothing), with_gpus(base, decode=None)).context == ()  # nothing known


def test_gpus_known_in_one_run_only_are_one_line_saying_why_not_in_the_other(base: RunManifest) -> None:
    """B's decode host had no nvidia-smi, B's prefill facts are not in its run.json at all (an older
    orch): one line for both roles, saying which run knows what; never taken as alike."""
    b = with_gpus(base, decode=(gpuinfo.NOT_AVAILABLE,) * 3, prefill=None)
    found = unlike(with_gpus(base), b).context
    assert found == (
        "the GPUs are known in one run only, so whether they differed is not known: "
        "the decode role ran on '2 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4' in A; "
        "in B nvidia-smi was not available (not there, or it failed); "
        "the prefill role ran on '2 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4' in A; "
        "in B run.json records none",
    )
    [back] = unlike(b, with_gpus(base)).context  # known in B only: said of B
    assert "ran on '2 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4' in B; in A nvidia-smi was" in back


def test_gpu_facts_are_masked_and_cut_as_every_quoted_text(base: RunManifest) -> None:
    """A secret-shaped value in a run.json host line (an older orch stored it unmasked) is masked on
    the page and the terminal, as the report masks host lines; a long model name is cut."""
    a = with_gpus(base, decode=(f"NVIDIA H100 {TOKEN}", "550.54.15", "12.4"))
    b = with_gpus(base, decode=("NVIDIA H200 " + "x" * 300, "550.54.15", "12.4"))
    [line] = unlike(a, b).context
    assert TOKEN not in line and "'NVIDIA H100 ••••, driver 550.54.15, CUDA 12.4' in A" in line
    assert line.endswith("x…' in B") and len(line) < 400


# ----------------------------------------------------------------------------- two runs on the fakes
MATRIX = fake_matrix("gpus", 2)


def nvidia_smi(model: str, count: int, driver: str, cuda: str) -> str:
    """What gpuinfo.COMMAND prints on a host with `count` GPUs (see tests/test_provenance.py)."""
    banner = f"| NVIDIA-SMI {driver}     Driver Version: {driver}     CUDA Version: {cuda}     |\n"
    return f"{model}, {driver}\n" * count + f"{gpuinfo.BANNER}\nMon Nov 30 12:00:00 2026\n" + banner


class GpuFleet(Fleet):
    """The fleet, each host's nvidia-smi answering as `gpus` says for its role at the next connect."""

    gpus: dict[str, str] = {}

    def host(self, testbed: str, key: str, host: Host) -> tuple[FakeTransport, FakeServiceManager]:
        t, m = super().host(testbed, key, host)
        t.script(gpuinfo.COMMAND, stdout=self.gpus.get(key, gpuinfo.NO_NVIDIA_SMI + "\n"))  # later scripts win
        return t, m


def orch(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    got = capsys.readouterr()
    return code, got.out + got.err


def test_runs_on_other_gpus_say_so_in_run_json_the_page_and_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`orch run` twice on one testbed whose decode host got other GPUs in between (nvidia-smi
    answering through the fake transport, a token in B's model name): run.json keeps each run's
    facts, masked; `orch compare` says the difference on its page and the terminal, whole."""
    fleet = GpuFleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, MATRIX, ("A",))
    out = tmp_path / "reports"
    runs = []
    for run_id, model, driver in (
        ("r1", "NVIDIA H100 80GB HBM3", "550.54.15"),
        ("r2", f"NVIDIA H200 {TOKEN}", "560.35.03"),
    ):
        fleet.gpus = {"decode": nvidia_smi(model, 2, driver, "12.4")}
        args = ("-i", str(i), "--out", str(out), "--run-id", run_id, "--seed", "1", "--skip-preflight")
        code, said = orch(capsys, "run", str(m), *args)
        assert code == 0, said
        runs.append(out / run_id)
    a, b = (load_manifest(r, plan=False).hosts for r in runs)
    assert (a["decode"]["gpu_model"], a["decode"]["gpu_driver"], a["decode"]["cuda"]) == (
        "2 x NVIDIA H100 80GB HBM3",
        "550.54.15",
        "12.4",
    )
    assert b["decode"]["gpu_model"] == "2 x NVIDIA H200 ••••" and TOKEN not in (runs[1] / "run.json").read_text()
    assert a["prefill"]["gpu_model"] == b["prefill"]["gpu_model"] == gpuinfo.NOT_AVAILABLE

    code, said = orch(capsys, "compare", str(runs[0]), str(runs[1]), "-o", str(tmp_path / "c.html"))
    assert code == 0, said
    line = (
        "the decode role ran on GPUs '2 x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4' in A, "
        "on '2 x NVIDIA H200 ••••, driver 560.35.03, CUDA 12.4' in B"
    )
    assert line in " ".join(said.split()), said
    page = (tmp_path / "c.html").read_text()
    shown = [html.unescape(x) for x in re.findall(r'<li class="caution unlike">(.*?)</li>', page, re.S)]
    assert shown == [line] and TOKEN not in page
