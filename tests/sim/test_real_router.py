"""The real SGLang PD router (`sglang-router`) in front of the simulated workers.

What only the real router shows: it calls the worker API the simulator implements (/health with
an HTTP/2 probe first, /server_info, /model_info), forwards each request to prefill and decode
with bootstrap fields, drops OpenAI's `user` field, and checks its workers only every 60 s by
default - so after a worker restart it keeps calling the worker healthy while it is down. orch's
readiness (worker /health directly, router /readiness, then one generate through the router)
must never let a repro start that the router would send to a dead or stale worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from helpers.real_router import make_inventory, router_argv

from orchestrator.cli.main import main
from orchestrator.core.records import TrialRecord
from orchestrator.edges.health import HealthCheck, probe_url, wait_all
from orchestrator.store.journal import read_journal

from .helpers import REPRO, Sim, free_port, get, wait_until

pytestmark = pytest.mark.sim

MATRIX = """\
name: real-router
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
replicates: 1
order: sequential
stop_after_repeated_failures: 1
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 8 --rounds 2 --seed {trial_seed}"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
  valid: [{regex: 'error=(?P<value>\\d+)', max: 0}]
"""


def test_sweep_through_the_real_router(tmp_path: Path, capsys) -> None:
    """Decode restarts behind a live router that checks it only every 60 s: every trial's repro
    goes through the router without one failed request (an error would void the trial)."""
    inventory, ports = make_inventory(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.env")}
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inventory), "--out", str(tmp_path / "r"), "--run-id", "rr"])
    out = capsys.readouterr().out
    assert code == 0, out
    trials = [r for r in read_journal(tmp_path / "r" / "rr" / "journal.jsonl").records if isinstance(r, TrialRecord)]
    assert [t.status for t in trials] == ["completed"] * 2, [t.failure for t in trials]  # no attempt failed
    assert all(t.metrics["corruption"].n == 8 for t in trials)
    assert "router:t-sglang-router" in trials[0].restarted
    assert trials[1].restarted == ["decode:t-decode"]  # the router stays up: decode restarts behind it
    assert all(set(t.health_wait_s) == {"prefill", "decode", "router"} for t in trials)
    with capsys.disabled():
        waits = "; ".join(", ".join(f"{r} {s:.2f}" for r, s in sorted(t.health_wait_s.items())) for t in trials)
        print(f"\nreal router sweep, readiness per trial (s; the router's includes the generate probe): {waits}")
    prefill_log = (tmp_path / "state" / "t-prefill.log").read_text()
    assert "room=" in prefill_log and "room=None" not in prefill_log  # requests came with bootstrap rooms
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.env")} == before
    assert not any(_listens(p) for p in ports.values())


PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def test_a_controller_behind_a_proxy_still_serves_its_loopback_deployment(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lab login node exports http_proxy for pip and curl. The real router (reqwest) sent its
    worker health checks to 127.0.0.1 through it, answered "insufficient healthy workers", and
    README's first command failed every trial after 120 s: local units, and the repro, get the
    loopback added to NO_PROXY (no request to 127.0.0.1 goes through a proxy; the proxy itself
    stays for what needs it, e.g. a model download)."""
    for name in PROXY_VARS:
        monkeypatch.setenv(name, f"http://127.0.0.1:{free_port()}")  # nothing listens: a proxy used fails
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.setenv("no_proxy", "registry.corp.example")
    inventory, ports = make_inventory(tmp_path)
    (tmp_path / "m.yaml").write_text(MATRIX)
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inventory), "--out", str(tmp_path / "r"), "--run-id", "px"])
    out = capsys.readouterr().out
    assert code == 0, out
    trials = [r for r in read_journal(tmp_path / "r" / "px" / "journal.jsonl").records if isinstance(r, TrialRecord)]
    assert [t.status for t in trials] == ["completed"] * 2, [t.failure for t in trials]
    assert not any(_listens(p) for p in ports.values())


def _listens(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _post(url: str) -> int:
    body = {"text": "direct", "sampling_params": {"max_new_tokens": 1}}
    try:
        return httpx.post(url, json=body, timeout=10).status_code
    except httpx.HTTPError:
        return -1


def test_restarted_worker_behind_live_router_gets_no_repro_until_it_serves(sim: Sim, tmp_path: Path) -> None:
    warm = {"SIM_WARMUP_S": "0"}
    prefill = sim.start("prefill", warm)
    decode = sim.start("decode", warm)
    rport, mport = free_port(), free_port()
    argv = router_argv(sys.executable, prefill.url, decode.url, host="127.0.0.1", port=rport, metrics_port=mport)
    with open(tmp_path / "router.log", "wb") as log:
        sim.started.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    router = f"http://127.0.0.1:{rport}"
    checks = [
        HealthCheck("prefill", prefill.url + "/health", 30),
        HealthCheck("decode", decode.url + "/health", 30),
        HealthCheck("router", router + "/readiness", 30, probe=probe_url(router + "/readiness")),
    ]
    seen: list[tuple[float, str, int]] = []  # every answer orch's readiness got: (time, port+path, status)

    def note(response: httpx.Response) -> None:
        url = response.request.url
        seen.append((time.monotonic(), f"{url.port}{url.path}", response.status_code))

    with httpx.Client(trust_env=False, event_hooks={"response": [note]}) as client:
        wait_all(checks, client=client)
        # restart decode behind the live router: stop it, then a new one that warms up 1 s
        decode.proc.terminate()
        decode.proc.wait(5)
        assert get(router + "/readiness")[0] == 200  # stale: the router still calls the dead decode healthy
        assert _post(router + "/generate") != 200  # ... and would send it a request
        restarted = sim.spawn("decode", {"SIM_WARMUP_S": "1.0"}, port=decode.port)
        seen.clear()
        waited = wait_all(checks, client=client)
        ready_at = time.monotonic()
    ready_line = next(line for line in restarted.text().splitlines() if line.endswith("[decode] ready"))
    assert ready_line  # the new decode logged ready; the wait ended after it, through a generate
    generates = [(t, status) for t, path, status in seen if path == f"{rport}/generate"]
    assert generates and generates[-1][1] == 200
    decode_ok = min(t for t, path, status in seen if path == f"{decode.port}/health" and status == 200)
    assert all(t >= decode_ok for t, _ in generates)  # no generate before the workers answered themselves
    assert waited["router"] >= 0.5
    done = subprocess.run(
        [*REPRO, "--router", router, "--sessions", "8", "--rounds", "1", "--seed", "3"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "ERRORS sessions: 0/8" in done.stdout, done.stdout + done.stderr  # its first request went through
    assert time.monotonic() - ready_at < 30


def test_worker_api_the_real_router_uses(sim: Sim, tmp_path: Path) -> None:
    """The router registers the sim workers (its HTTP/2 probe, /server_info, /model_info) and
    forwards a chat request to both with bootstrap fields; the client gets decode's answer."""
    prefill = sim.start("prefill", {"SIM_WARMUP_S": "0"}, extra=("--disaggregation-bootstrap-port", str(free_port())))
    decode = sim.start("decode", {"SIM_WARMUP_S": "0"})
    bootstrap = _bootstrap_port(prefill.url)
    rport = free_port()
    argv = router_argv(
        sys.executable, prefill.url, decode.url, host="127.0.0.1", port=rport, metrics_port=free_port(),
        bootstrap_port=bootstrap,
    )  # fmt: skip
    with open(tmp_path / "router.log", "wb") as log:
        sim.started.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    router = f"http://127.0.0.1:{rport}"
    wait_until(lambda: _status(router + "/readiness") == 200, timeout=30, interval=0.05)
    status, body = get(router + "/readiness")
    assert body == {"status": "ready", "healthy_workers": 2, "total_workers": 2}
    done = subprocess.run(
        [*REPRO, "--router", router, "--sessions", "4", "--rounds", "2", "--seed", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "ERRORS sessions: 0/4" in done.stdout and "CORRUPTION sessions: 0/4" in done.stdout, done.stdout
    rooms = [line.split("room=")[1].split()[0] for line in prefill.text().splitlines() if " room=" in line]
    assert len(rooms) == 8 and all(r.isdigit() for r in rooms)  # prefill got every request, with a room
    assert len([line for line in decode.text().splitlines() if "decode req=" in line]) == 8
    info = json.loads(httpx.get(prefill.url + "/server_info").text)
    assert info["disaggregation_bootstrap_port"] == bootstrap and info["disaggregation_mode"] == "prefill"


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return -1


def _bootstrap_port(url: str) -> int:
    value = json.loads(httpx.get(url + "/get_server_info").text)["disaggregation_bootstrap_port"]
    assert isinstance(value, int) and _status(f"http://127.0.0.1:{value}/route") == 200
    return value


def test_a_worker_the_inventory_lacks_behind_the_real_router_voids_the_trial(sim: Sim, tmp_path: Path, capsys) -> None:
    """The router's command line lists a third worker (a decode orch did not start, on a port the OS
    chose): sglang-router 0.3.2 registers it, calls itself ready 3/3 and would send it part of the
    repro. orch names it from the router's GET /workers and counts no trial as data."""
    stray = sim.start("decode", {"SIM_WARMUP_S": "0"})
    inventory, ports = make_inventory(tmp_path, stray_decode=f"http://localhost:{stray.port}/")
    (tmp_path / "m.yaml").write_text(MATRIX)
    started = time.monotonic()
    code = main([
        "run", str(tmp_path / "m.yaml"), "-i", str(inventory), "--out", str(tmp_path / "r"), "--run-id", "rs",
        "--retries", "0",
    ])  # fmt: skip
    took = time.monotonic() - started
    out = capsys.readouterr().out
    assert code == 1, out
    trials = [r for r in read_journal(tmp_path / "r" / "rs" / "journal.jsonl").records if isinstance(r, TrialRecord)]
    assert trials and all(t.status == "failed" and t.failure is not None for t in trials)
    failure = trials[0].failure
    assert failure is not None and failure.error == "IdentityError", failure
    assert failure.message.startswith(
        f"router lists decode worker http://localhost:{stray.port}/, which is not one of the inventory's "
        f"instances (prefill http://127.0.0.1:{ports['prefill']}, decode http://127.0.0.1:{ports['decode']})"
    ), failure.message
    assert not trials[0].metrics  # no repro ran: nothing measured
    assert "decode req=" not in stray.text()  # the stray served nothing
    assert not any(_listens(p) for p in ports.values())
    with capsys.disabled():
        print(f"\nreal router with a stray worker: sweep refused in {took:.2f} s")
