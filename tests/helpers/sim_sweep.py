"""A three-role deployment of the bundled simulator on free loopback ports, for end-to-end
sweeps (the env files include a CRLF one without a final newline, to prove byte-exact restore)."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.netutil import free_ports, port_open
from orchestrator.cli.main import main

ENV_FILES = {
    "prefill.env": "# prefill flags\nSIM_WARMUP_S=0.05\nSIM_SEED=7\nSGLANG_DSV4_BF16_INDEX_K=1\n",
    "decode.env": (
        "# decode flags\r\nSIM_WARMUP_S=0.05\r\nSIM_SEED=7\r\nSGLANG_DSV4_BF16_INDEX_K=1\r\n"
        'SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\r\nSGLANG_EXTRA_ARGS=""'
    ),  # CRLF, no final newline
    "router.env": "SIM_WARMUP_S=0.05\n",
}


def make_inventory(tmp_path: Path) -> tuple[Path, list[int]]:
    pp, rp, dp = free_ports(3)
    for name, text in ENV_FILES.items():
        (tmp_path / name).write_bytes(text.encode())
    srv = '["{python}", -m, orchestrator.sim.server'
    inv = tmp_path / "inventory.yaml"
    inv.write_text(
        textwrap.dedent(f"""\
        testbeds:
          sim:
            state_dir: state
            hosts:
              prefill:
                env_file: prefill.env
                units: [{{name: t-prefill, command: {srv}, --role, prefill, --port, "{pp}"]}}]
                url: http://127.0.0.1:{pp}
                health_timeout: 30
              decode:
                env_file: decode.env
                units: [{{name: t-decode, command: {srv}, --role, decode, --port, "{dp}"]}}]
                url: http://127.0.0.1:{dp}
                health_timeout: 30
              router:
                env_file: router.env
                units: [{{name: t-router, command: {srv}, --role, router, --port, "{rp}",
                          --prefill-url, "http://127.0.0.1:{pp}", --decode-url, "http://127.0.0.1:{dp}"]}}]
                url: http://127.0.0.1:{rp}
                health_timeout: 30
                after: [prefill, decode]
        """)
    )
    return inv, [pp, rp, dp]


def sim_overlap_matrix(name: str, before_repro: str, extra: str = "") -> str:
    """A two-cell matrix (decode's overlap 0 then 1, one trial each, in that order) whose repro runs
    `before_repro` (a shell command, `&&`-joined) and then two sessions of the simulator's repro:
    what the mid-run tests do to a host between the sweep's steps. `extra`: more top-level keys."""
    return (
        f"name: {name}\n"
        "factors:\n"
        "  overlap:\n"
        "    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}\n"
        '    levels: ["0", "1"]\n'
        "replicates: 1\n"
        "order: sequential\n"
        "repro:\n"
        "  command: >-\n"
        f"    {before_repro} &&\n"
        "    {python} -m orchestrator.sim.repro --router {router_url} --sessions 2 --rounds 1 --seed {trial_seed}\n"
        "  timeout: 60\n"
        "  metrics:\n"
        "    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}\n"
        f"{extra}"
    )


@dataclass(frozen=True)
class SimRun:
    """One `orch run` on a fresh simulated deployment (sim_run): its exit code and output, its
    folder, the env files as they were before it, and the ports its servers listened on."""

    code: int
    out: str
    err: str
    run_dir: Path
    folder: Path
    originals: dict[str, bytes]
    ports: list[int]

    def trials(self) -> dict[int, dict[str, object]]:
        """The journal's trial records by trial number (the last record of each)."""
        lines = [json.loads(line) for line in (self.run_dir / "journal.jsonl").read_text().splitlines()]
        return {r["trial"]: r for r in lines if r.get("type") == "trial"}

    def assert_restored(self) -> None:
        """Every env file byte-identical to before the run, and nothing left listening."""
        for name, data in self.originals.items():
            assert (self.folder / name).read_bytes() == data, name
        assert not any(port_open(p) for p in self.ports)


def sim_run(folder: Path, matrix: str, run_id: str, capsys: pytest.CaptureFixture[str]) -> SimRun:
    """`orch run` of `matrix` (its text) on a simulated deployment made in `folder` (make_inventory),
    the CLI end to end, its report in folder/reports/RUN_ID."""
    inventory, ports = make_inventory(folder)
    (folder / "m.yaml").write_text(matrix)
    originals = {n: (folder / n).read_bytes() for n in ENV_FILES}
    reports = folder / "reports"
    code = main(["run", str(folder / "m.yaml"), "-i", str(inventory), "--out", str(reports), "--run-id", run_id])
    out, err = capsys.readouterr()
    return SimRun(code, out, err, reports / run_id, folder, originals, ports)
